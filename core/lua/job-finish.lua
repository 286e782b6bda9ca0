-- Records a job's outcome once; a job already finished is left as it is.
-- KEYS: the job's hash, its tombstone (which tenant it belonged to, kept after the record expires).
-- ARGV: status, finishedAt, HTTP status, result, timing (JSON), version, retention (s), tombstone
-- retention (s), '1' to finish only a job no replica has started (a cancel), result type or ''.
-- Returns 1 when this call finished it, else 0.
local s = redis.call('HGET', KEYS[1], 'status')
if not s or s == 'succeeded' or s == 'failed' or s == 'canceled' then return 0 end
if ARGV[9] == '1' and s ~= 'queued' then return 0 end
redis.call('HSET', KEYS[1], 'status', ARGV[1], 'finishedAt', ARGV[2], 'httpStatus', ARGV[3], 'result', ARGV[4], 'timing', ARGV[5], 'version', ARGV[6], 'finishedBy', ARGV[9] == '1' and 'gateway' or 'replica')
if ARGV[10] ~= '' then redis.call('HSET', KEYS[1], 'type', ARGV[10]) end
redis.call('EXPIRE', KEYS[1], ARGV[7])
redis.call('SET', KEYS[2], redis.call('HGET', KEYS[1], 'tenant') or '', 'EX', ARGV[8])
return 1
