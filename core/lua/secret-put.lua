-- KEYS: the function index, the function's record, its secrets; ARGV: name, sealed value, now
-- (ISO), most, the function. 1: added; 2: replaced; 0: the function has `most` others already; -1: no such
-- function (or it is being deleted).
if redis.call('SISMEMBER', KEYS[1], ARGV[5]) == 0 or redis.call('HEXISTS', KEYS[2], 'active') == 0 then return -1 end
local old = redis.call('HGET', KEYS[3], ARGV[1])
if not old and redis.call('HLEN', KEYS[3]) >= tonumber(ARGV[4]) then return 0 end
local createdAt = ARGV[3]
if old then createdAt = cjson.decode(old).createdAt or ARGV[3] end
redis.call('HSET', KEYS[3], ARGV[1], cjson.encode({ sealed = ARGV[2], createdAt = createdAt, updatedAt = ARGV[3] }))
if old then return 2 end
return 1
