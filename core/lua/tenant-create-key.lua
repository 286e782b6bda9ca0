-- Creating a key and deleting its tenant must not interleave: the key is written only while the
-- tenant exists, in one step.
-- KEYS: the tenants hash, the keys-by-hash hash, the tenant's keys hash.
-- ARGV: tenant, key hash, key id, key record (JSON). Returns 1 if created, 0 if the tenant is gone.
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('HSET', KEYS[2], ARGV[2], ARGV[4])
redis.call('HSET', KEYS[3], ARGV[3], ARGV[2])
return 1
