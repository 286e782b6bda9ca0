-- Hands entries over: each one still pending with `ARGV[2]` (another replica may have taken it
-- over meanwhile: left alone) gets the idle time `ARGV[3]` ms, so the next look of any replica
-- takes it, with its delivery count as it is (the delivery ends as a crash would). The ids are
-- `ARGV[5…]`, or, with none given, every entry the consumer holds (a replica that died). When
-- any was handed over, `ARGV[4]` is published on the cancel channel (KEYS[2]): the function's
-- replicas look now instead of at their next tending.
-- KEYS: stream, channel; ARGV: group, consumer, idle ms, message, ids…
local held = {}
if #ARGV > 4 then
  for i = 5, #ARGV do
    local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1)[1]
    if p and p[2] == ARGV[2] then held[#held + 1] = p end
  end
else
  held = redis.pcall('XPENDING', KEYS[1], ARGV[1], '-', '+', 100000, ARGV[2])
  -- No stream or group (the function never had a live request): nothing held.
  if held.err then return 0 end
end
for _, p in ipairs(held) do
  redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, p[1], 'IDLE', ARGV[3], 'RETRYCOUNT', p[4], 'JUSTID')
end
if #held > 0 then redis.call('PUBLISH', KEYS[2], ARGV[4]) end
return #held
