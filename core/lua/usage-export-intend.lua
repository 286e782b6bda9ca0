-- Records the range an exporter is about to write to S3, only if the cursor is still where it read
-- it and no other range is in flight: two leaders (a lease that moved mid-batch) then write the same
-- range, never two different ones over the same records.
-- KEYS: cursor, intent. ARGV: the cursor read ('0-0' for none), the intent (JSON).
-- Returns 1 if recorded, else 0.
local cursor = redis.call('GET', KEYS[1]) or '0-0'
if cursor ~= ARGV[1] or redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
redis.call('SET', KEYS[2], ARGV[2])
return 1
