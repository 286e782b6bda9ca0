-- Acknowledges and deletes each of ARGV[3…] still pending with the consumer ARGV[2], with its part
-- queued apart (core/live-entry.ts), if any. KEYS: stream; ARGV: group, consumer, ids…
-- #include spill-key
for i = 3, #ARGV do
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1)[1]
  if p and p[2] == ARGV[2] then
    redis.call('XACK', KEYS[1], ARGV[1], ARGV[i])
    redis.call('XDEL', KEYS[1], ARGV[i])
    redis.call('UNLINK', spill_key(KEYS[1], ARGV[i]))
  end
end
return 0
