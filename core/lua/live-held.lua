-- The entries the consumer ARGV[2] holds, in one call: id, then job field (`d`; '' for one
-- already deleted from the stream), for each. KEYS: stream; ARGV: group, consumer.
-- #include live-job-field
local held = redis.pcall('XPENDING', KEYS[1], ARGV[1], '-', '+', 100000, ARGV[2])
if held.err then return {} end
local out = {}
for _, p in ipairs(held) do
  local e = redis.call('XRANGE', KEYS[1], p[1], p[1])[1]
  out[#out + 1] = p[1]
  out[#out + 1] = e and job_field(e[2]) or ''
end
return out
