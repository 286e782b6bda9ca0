-- Leaves the active set only while its stream is empty: a request queued meanwhile keeps it. KEYS: active set, stream; ARGV: fn.
if redis.call('XLEN', KEYS[2]) > 0 then return 0 end
return redis.call('SREM', KEYS[1], ARGV[1])
