-- Lua shared by the scripts that write usage: `add_record` keeps one record (stream entry, its
-- sums per hour × function, and its function's per-minute sums for core/series.ts), `add_month`
-- its sums per tenant × month × function × version and the tenant's month-to-date totals (fields
-- `*|…`: what budgets judge), `roll_up` adds the sums to the hashes. A burst of requests costs a
-- few hash increments in all rather than ten each. A record is RECORD_FIELDS ARGV fields from
-- `a + 1` (recordArgs in core/usage.ts); its hour, minute and month keys are given with it.
local sums, order, tenants, minutes, minute_order, months, month_order = {}, {}, {}, {}, {}, {}, {}
local function add_record(records, cap, hour, minute, a)
  redis.call('XADD', records, 'MAXLEN', '~', cap, '*', 'r', ARGV[a + 1])
  local f = ARGV[a + 2] .. '|'
  local g = hour .. ' ' .. f
  local t = sums[g]
  if not t then
    t = { hour = hour, f = f, requests = 0, compute_ms = 0, infer_ms = 0, queue_ms = 0, cold_starts = 0, errors = 0, bytes_in = 0, bytes_out = 0, cost = 0 }
    sums[g] = t
    order[#order + 1] = g
  end
  local cold = tonumber(ARGV[a + 6]) > 0 and 1 or 0
  local failed = tonumber(ARGV[a + 7]) >= 500 and 1 or 0
  t.requests = t.requests + 1
  t.compute_ms = t.compute_ms + tonumber(ARGV[a + 3])
  t.infer_ms = t.infer_ms + tonumber(ARGV[a + 4])
  t.queue_ms = t.queue_ms + tonumber(ARGV[a + 5])
  t.cold_starts = t.cold_starts + cold
  if tonumber(ARGV[a + 7]) >= 400 then t.errors = t.errors + 1 end
  t.bytes_in = t.bytes_in + tonumber(ARGV[a + 8])
  t.bytes_out = t.bytes_out + tonumber(ARGV[a + 9])
  t.cost = t.cost + tonumber(ARGV[a + 12])
  tenants[ARGV[a + 10]] = true
  local m = minutes[minute]
  if not m then
    m = { requests = 0, errors = 0, server_errors = 0, cold_starts = 0, compute_ms = 0, queue_ms = 0, lat = {} }
    minutes[minute] = m
    minute_order[#minute_order + 1] = minute
  end
  m.requests = m.requests + 1
  if tonumber(ARGV[a + 7]) >= 400 then m.errors = m.errors + 1 end
  m.server_errors = m.server_errors + failed
  m.cold_starts = m.cold_starts + cold
  m.compute_ms = m.compute_ms + tonumber(ARGV[a + 3])
  m.queue_ms = m.queue_ms + tonumber(ARGV[a + 5])
  local b = 'lat_' .. ARGV[a + 11]
  m.lat[b] = (m.lat[b] or 0) + 1
end
local MONTH_SUMS = { 'requests', 'errors', 'compute_ms', 'cold_ms', 'bytes_in', 'bytes_out', 'cost' }
local function add_month(month, a)
  local totals = month .. ' *|'
  for _, g in ipairs({ month .. ' ' .. ARGV[a + 13], totals }) do
    local s = months[g]
    if not s then
      s = { key = month, f = string.sub(g, #month + 2), requests = 0, errors = 0, compute_ms = 0, cold_ms = 0, bytes_in = 0, bytes_out = 0, cost = 0 }
      months[g] = s
      month_order[#month_order + 1] = g
    end
    s.requests = s.requests + 1
    if tonumber(ARGV[a + 7]) >= 400 then s.errors = s.errors + 1 end
    s.compute_ms = s.compute_ms + tonumber(ARGV[a + 3])
    s.cold_ms = s.cold_ms + tonumber(ARGV[a + 6])
    s.bytes_in = s.bytes_in + tonumber(ARGV[a + 8])
    s.bytes_out = s.bytes_out + tonumber(ARGV[a + 9])
    s.cost = s.cost + tonumber(ARGV[a + 12])
  end
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
    if t.cost > 0 then redis.call('HINCRBYFLOAT', t.hour, t.f .. 'cost', string.format('%.17g', t.cost)) end
  end
  for tenant in pairs(tenants) do redis.call('SADD', tenants_key, tenant) end
  for _, key in ipairs(minute_order) do
    local m = minutes[key]
    for _, name in ipairs({ 'requests', 'errors', 'server_errors', 'cold_starts' }) do
      if m[name] > 0 then redis.call('HINCRBY', key, name, m[name]) end
    end
    redis.call('HINCRBYFLOAT', key, 'compute_ms', string.format('%.17g', m.compute_ms))
    redis.call('HINCRBYFLOAT', key, 'queue_ms', string.format('%.17g', m.queue_ms))
    for b, n in pairs(m.lat) do redis.call('HINCRBY', key, b, n) end
    redis.call('EXPIRE', key, {{SERIES_TTL_S}})
  end
  for _, g in ipairs(month_order) do
    local s = months[g]
    for _, name in ipairs(MONTH_SUMS) do
      if s[name] > 0 then redis.call('HINCRBYFLOAT', s.key, s.f .. name, string.format('%.17g', s[name])) end
    end
  end
end
