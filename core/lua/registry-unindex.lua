-- Takes a function out of the index (unless KEYS[3], its stream, holds entries): 1, or 0 when it is neither indexed nor recorded, or −(entries queued).
if KEYS[3] then
  local queued = redis.call('XLEN', KEYS[3])
  if queued > 0 then return -queued end
end
local indexed = redis.call('SREM', KEYS[1], ARGV[1])
if indexed == 0 and redis.call('EXISTS', KEYS[2]) == 0 then return 0 end
return 1
