-- Per function's live stream: the requests no replica has taken yet, and the id of the oldest of
-- them (its first part is when it was queued, in ms of Redis's clock), read at once for /metrics.
-- Taken entries stay pending until acknowledged and deleted, so the waiting ones are those after
-- the group's last-delivered-id, and they number the stream's length less the pending count.
-- KEYS: live streams; ARGV: the replicas' group. Returns waiting, oldest id ('0': none) per stream.
local out = {}
for _, stream in ipairs(KEYS) do
  local waiting, oldest = 0, '0'
  local groups = redis.pcall('XINFO', 'GROUPS', stream)
  -- No stream (the function never had a live request): nothing waits.
  if not groups.err then
    local pending, last = 0, '0-0'
    for _, g in ipairs(groups) do
      local f = {}
      for j = 1, #g, 2 do f[g[j]] = g[j + 1] end
      if f['name'] == ARGV[1] then pending, last = f['pending'], f['last-delivered-id'] end
    end
    waiting = math.max(0, redis.call('XLEN', stream) - pending)
    if waiting > 0 then
      local first = redis.call('XRANGE', stream, '(' .. last, '+', 'COUNT', 1)[1]
      if first then oldest = first[1] end
    end
  end
  out[#out + 1] = waiting
  out[#out + 1] = oldest
end
return out
