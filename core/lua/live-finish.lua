-- Finishes entries in one call: for each, XACK; when that acknowledged it (it was still pending:
-- no other replica finished it first) its usage record is written; its reply is published; and
-- the entry is deleted. The acknowledgement is the usage dedupe: a request run twice (taken over
-- from a replica that went silent, which then finished too) is metered by whichever finished
-- first. The reply goes out either way: a gateway takes the first reply and drops any other, and
-- one whose stream was lost with Redis's data still gets its answer. Replies to one gateway go
-- out as one message (encodeReplies), published last: a call that fails part way (Redis out of
-- memory) answers nobody, and the entries it did not finish run again. (A replica publishes a
-- lone request's reply, and any reply of 16 KiB or more, before this call instead:
-- LiveConsumer.flushFinished.)
-- KEYS: stream, records stream, tenants set, then an hour key and a minute key per entry (the
-- stream for both when it has no record), then a month key per entry (the stream: no record).
-- ARGV: group, records cap, then per entry: id, RECORD_FIELDS (empty: no record); then per
-- gateway: channel, message.
-- #include usage
local stride = 1 + {{RECORD_FIELDS}}
local n = (#KEYS - 3) / 3
local out = {}
for i = 1, n do
  local a = 2 + (i - 1) * stride
  local id = ARGV[a + 1]
  local ok, acked = pcall(redis.call, 'XACK', KEYS[1], ARGV[1], id)
  out[i] = (ok and acked == 1) and 1 or 0
  if out[i] == 1 and ARGV[a + 2] ~= '' then add_month(KEYS[3 + 2 * n + i], a + 1) end
  if out[i] == 1 and ARGV[a + 2] ~= '' then add_record(KEYS[2], ARGV[2], KEYS[2 + 2 * i], KEYS[3 + 2 * i], a + 1) end
  redis.call('XDEL', KEYS[1], id)
end
roll_up(KEYS[3])
for j = 3 + n * stride, #ARGV, 2 do redis.call('PUBLISH', ARGV[j], ARGV[j + 1]) end
return out
