-- Records a line's outcome once, and counts it, unless the batch is gone or already final. When
-- (ms, Redis's clock) a line last finished is kept for /metrics' stalled-batch gauge.
local s = redis.call('HGET', KEYS[1], 'status')
if s ~= 'validating' and s ~= 'in_progress' and s ~= 'cancelling' then return -1 end
if redis.call('HSETNX', KEYS[2], ARGV[1], ARGV[2]) == 0 then return 0 end
redis.call('HINCRBY', KEYS[1], ARGV[3], 1)
if ARGV[4] == '1' then redis.call('HINCRBY', KEYS[1], 'invalid', 1) end
local t = redis.call('TIME')
redis.call('HSET', KEYS[1], 'progressAt', string.format('%.0f', t[1] * 1000 + math.floor(t[2] / 1000)))
return 1
