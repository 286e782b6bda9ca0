-- Changes which versions of a function take its traffic (core/traffic.ts) in one call: with
-- ARGV[1] other than '*', only while the function's split is still exactly ARGV[1] ('' for none),
-- so that a rollout's next step never undoes a rollback or a deploy made meanwhile.
-- KEYS: the function's hash, the set of functions with an automatic rollout. ARGV: the split
-- expected ('*': any), the version to make active ('': keep it), the new split as JSON ('': none),
-- the rollout's outcome as JSON ('': keep the last), the time (ISO), the function's key.
-- Returns 0: no such function; -1: its split changed meanwhile; 1: done.
local active = redis.call('HGET', KEYS[1], 'active')
if not active then return 0 end
if ARGV[1] ~= '*' and (redis.call('HGET', KEYS[1], 'split') or '') ~= ARGV[1] then return -1 end
if ARGV[2] ~= '' and ARGV[2] ~= active then
  redis.call('HSET', KEYS[1], 'active', ARGV[2], 'previous', active, 'updatedAt', ARGV[5])
end
if ARGV[3] == '' then redis.call('HDEL', KEYS[1], 'split') else redis.call('HSET', KEYS[1], 'split', ARGV[3]) end
if ARGV[4] ~= '' then redis.call('HSET', KEYS[1], 'rollout', ARGV[4]) end
if ARGV[3] ~= '' and cjson.decode(ARGV[3]).auto then redis.call('SADD', KEYS[2], ARGV[6]) else redis.call('SREM', KEYS[2], ARGV[6]) end
return 1
