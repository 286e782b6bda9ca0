-- Adds a request's chunks in order (core/chunks.ts): XADD with the id `0-*`, which Redis numbers
-- 0-1, 0-2, … after the last id the stream had, so ids are the chunks' sequence numbers and a run
-- taken over after a crash goes on numbering; renews the stream's time to live, and tells its
-- readers on its channel. A job's chunks are kept within a count and a byte total, oldest dropped
-- first (KEYS[2] holds the total). A sync run's are never trimmed here: its gateway removes them
-- as its caller reads them. Answers the last id added and the stream's length (for a sync run,
-- what its gateway has not read yet).
-- KEYS: the chunks stream, its byte total. ARGV: ttl ms, count cap (0: no trimming), byte cap,
-- channel, then the chunks' data.
local ttl, maxCount, maxBytes = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local last, added = '', 0
for i = 5, #ARGV do
  last = redis.call('XADD', KEYS[1], '0-*', 'd', ARGV[i])
  added = added + #ARGV[i]
end
redis.call('PEXPIRE', KEYS[1], ttl)
local len = redis.call('XLEN', KEYS[1])
if maxCount > 0 then
  local bytes = redis.call('INCRBY', KEYS[2], added)
  redis.call('PEXPIRE', KEYS[2], ttl)
  while len > 1 and (len > maxCount or bytes > maxBytes) do
    local first = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', 1)[1]
    redis.call('XDEL', KEYS[1], first[1])
    bytes = redis.call('DECRBY', KEYS[2], #first[2][2])
    len = len - 1
  end
end
redis.call('PUBLISH', ARGV[4], last)
return { last, len }
