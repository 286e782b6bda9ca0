-- Deletes a function's records (KEYS[2..5]: its record, versions, footprints, secrets) unless it is in the index again: 1, or 0 when it is.
if redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 1 then return 0 end
redis.call('DEL', KEYS[2], KEYS[3], KEYS[4], KEYS[5])
return 1
