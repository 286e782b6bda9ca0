-- Ends an export once its files are in S3: the cursor moves to the range's last id, the intent
-- goes, and the records up to it leave the stream, together, and only while that intent is the
-- one recorded (an exporter that lost the race commits nothing).
-- KEYS: cursor, intent, records stream. ARGV: the intent (JSON), its last id.
-- Returns 1 if committed, else 0.
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2])
redis.call('DEL', KEYS[2])
redis.call('XTRIM', KEYS[3], 'MINID', ARGV[2])
redis.call('XDEL', KEYS[3], ARGV[2])
return 1
