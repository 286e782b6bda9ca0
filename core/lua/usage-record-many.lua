-- Records of one tick, each kept only if its id is new (SET NX on a seen key). Live requests do
-- not come here: their stream entry's acknowledgement dedupes them (core/live-queue.ts).
-- KEYS: records stream, tenants set, then (seen key, hour key, minute key) per record, then a
-- month key per record.
-- ARGV: seen ttl, stream cap, then RECORD_FIELDS per record.
-- #include usage
local n = (#KEYS - 2) / 4
local out = {}
for i = 1, n do
  if redis.call('SET', KEYS[3 * i], '1', 'NX', 'EX', ARGV[1]) then
    out[i] = 1
    add_month(KEYS[2 + 3 * n + i], 2 + (i - 1) * {{RECORD_FIELDS}})
    add_record(KEYS[1], ARGV[2], KEYS[3 * i + 1], KEYS[3 * i + 2], 2 + (i - 1) * {{RECORD_FIELDS}})
  else
    out[i] = 0
  end
end
roll_up(KEYS[2])
return out
