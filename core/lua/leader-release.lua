-- Gives up the scheduler's lease if this candidate holds it.
-- KEYS: the lease. ARGV: the candidate's id. Returns 1 if released, else 0.
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end
