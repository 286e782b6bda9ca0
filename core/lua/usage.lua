-- Lua shared by the scripts that write usage: `add_record` keeps one record (stream entry, and
-- its sums per hour × function), `roll_up` adds the sums to the hourly hashes. A burst of
-- requests costs a few hash increments in all rather than ten each. A record is ten ARGV fields
-- from `a + 1` (recordArgs in core/usage.ts); its hour key is given with it.
local sums, order, tenants = {}, {}, {}
local function add_record(records, cap, hour, a)
  redis.call('XADD', records, 'MAXLEN', '~', cap, '*', 'r', ARGV[a + 1])
  local f = ARGV[a + 2] .. '|'
  local g = hour .. ' ' .. f
  local t = sums[g]
  if not t then
    t = { hour = hour, f = f, requests = 0, compute_ms = 0, infer_ms = 0, queue_ms = 0, cold_starts = 0, errors = 0, bytes_in = 0, bytes_out = 0 }
    sums[g] = t
    order[#order + 1] = g
  end
  t.requests = t.requests + 1
  t.compute_ms = t.compute_ms + tonumber(ARGV[a + 3])
  t.infer_ms = t.infer_ms + tonumber(ARGV[a + 4])
  t.queue_ms = t.queue_ms + tonumber(ARGV[a + 5])
  if tonumber(ARGV[a + 6]) > 0 then t.cold_starts = t.cold_starts + 1 end
  if tonumber(ARGV[a + 7]) >= 400 then t.errors = t.errors + 1 end
  t.bytes_in = t.bytes_in + tonumber(ARGV[a + 8])
  t.bytes_out = t.bytes_out + tonumber(ARGV[a + 9])
  tenants[ARGV[a + 10]] = true
end
local function roll_up(tenants_key)
  for _, g in ipairs(order) do
    local t = sums[g]
    for _, m in ipairs({ 'requests', 'cold_starts', 'errors', 'bytes_in', 'bytes_out' }) do
      if t[m] > 0 then redis.call('HINCRBY', t.hour, t.f .. m, t[m]) end
    end
    for _, m in ipairs({ 'compute_ms', 'infer_ms', 'queue_ms' }) do
      redis.call('HINCRBYFLOAT', t.hour, t.f .. m, string.format('%.17g', t[m]))
    end
  end
  for tenant in pairs(tenants) do redis.call('SADD', tenants_key, tenant) end
end
