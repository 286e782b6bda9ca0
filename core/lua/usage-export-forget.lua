-- Drops an intent that no longer starts at the cursor (a failover rolled one of them back), if it
-- is still the one read. Its files stay: later batches are checked against them.
-- KEYS: intent. ARGV: the intent as read. Returns 1 if dropped, else 0.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
return 1
