-- #include live-job-field
local from = ARGV[3] == '-' and '-' or '(' .. ARGV[3]
local entries = redis.call('XRANGE', KEYS[1], from, '+', 'COUNT', ARGV[2])
local out = { '' }
for _, e in ipairs(entries) do
  local id = e[1]
  out[1] = id
  local p = redis.pcall('XPENDING', KEYS[1], ARGV[1], id, id, 1)
  if type(p) ~= 'table' or p.err or p[1] == nil then
    redis.call('XDEL', KEYS[1], id)
    out[#out + 1] = job_field(e[2])
  end
end
return out
