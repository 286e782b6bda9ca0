-- Takes out, in one call, up to ARGV[2] entries after ARGV[3] (an id; '-' from the start) that no
-- replica has read (not in the group's pending list), and returns the id of the last entry looked
-- at ('' when none was) followed by the job field (`d`) of each one taken out. One call, so no
-- replica reads an entry between the look and the delete; pages, so a long queue neither blocks
-- Redis nor arrives in one reply.
-- Each one's part queued apart (core/live-entry.ts), if any, goes with it.
-- KEYS: stream; ARGV: group, page size, after.
-- #include live-job-field
-- #include spill-key
local from = ARGV[3] == '-' and '-' or '(' .. ARGV[3]
local entries = redis.call('XRANGE', KEYS[1], from, '+', 'COUNT', ARGV[2])
local out = { '' }
for _, e in ipairs(entries) do
  local id = e[1]
  out[1] = id
  local p = redis.pcall('XPENDING', KEYS[1], ARGV[1], id, id, 1)
  if type(p) ~= 'table' or p.err or p[1] == nil then
    redis.call('XDEL', KEYS[1], id)
    redis.call('UNLINK', spill_key(KEYS[1], id))
    out[#out + 1] = job_field(e[2])
  end
end
return out
