-- A replica is about to run a job: marks it running, or answers why not.
-- KEYS: the job's hash. ARGV: the time (ISO), the replica's id.
-- Returns 'running', 'cancel' (its caller canceled it), 'gone' (no such job) or its final status.
local s = redis.call('HGET', KEYS[1], 'status')
if not s then return 'gone' end
if s == 'succeeded' or s == 'failed' or s == 'canceled' then return s end
if redis.call('HGET', KEYS[1], 'cancel') == '1' then return 'cancel' end
redis.call('HSET', KEYS[1], 'status', 'running', 'startedAt', ARGV[1], 'replica', ARGV[2])
return 'running'
