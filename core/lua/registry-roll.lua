-- Makes a new version active in place of ARGV[1], unless another became active meanwhile (a
-- deploy) or the function is gone: 1, or 0.
-- KEYS: the function's record, its versions, its footprints, the scheduler's active set;
-- ARGV: the version expected active, the new version, its manifest (JSON), its time, the function.
if redis.call('HGET', KEYS[1], 'active') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
redis.call('HSET', KEYS[1], 'active', ARGV[2], 'updatedAt', ARGV[4])
-- The same code and models: placement may count on the footprint measured for the version before.
local footprint = redis.call('HGET', KEYS[3], ARGV[1])
if footprint then redis.call('HSET', KEYS[3], ARGV[2], footprint) end
redis.call('SADD', KEYS[4], ARGV[5])
return 1
