-- A key is owned by the tenant whose name it qualifies (core/names.ts); only one deployed while
-- names were global can be another's. A function registered before tenants existed belongs to
-- the default tenant. Atomic, so two deploys of a new key at once cannot disagree on its owner.
-- KEYS: the function's hash. ARGV: the deploying tenant, the default tenant. Returns the owner.
local owner = redis.call('HGET', KEYS[1], 'tenant')
if owner then return owner end
if redis.call('EXISTS', KEYS[1]) == 1 then owner = ARGV[2] else owner = ARGV[1] end
redis.call('HSET', KEYS[1], 'tenant', owner)
return owner
