-- The leading scheduler's samples for core/series.ts: each minute's field keeps the highest value
-- sampled in it.
-- KEYS: a minute key per function.
-- ARGV: per function, its depth and ready replicas.
for i, key in ipairs(KEYS) do
  local values = { depth = tonumber(ARGV[2 * i - 1]), ready = tonumber(ARGV[2 * i]) }
  for field, v in pairs(values) do
    local had = tonumber(redis.call('HGET', key, field) or '-1')
    if v > had then redis.call('HSET', key, field, v) end
  end
  redis.call('EXPIRE', key, {{SERIES_TTL_S}})
end
return 0
