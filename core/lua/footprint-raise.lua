-- Raises a version's footprint to ARGV[2] unless it is higher already. KEYS: footprints hash; ARGV: version, bytes.
local cur = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
if tonumber(ARGV[2]) > cur then redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) end
return 0
