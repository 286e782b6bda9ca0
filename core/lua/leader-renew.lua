-- Renews the scheduler's lease while this candidate holds it.
-- KEYS: the lease. ARGV: the candidate's id, the lease's length (ms). Returns 1 if renewed, else 0.
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end
