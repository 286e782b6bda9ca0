-- Records a job's outcome once; a job already finished is left as it is.
-- A result of 16 KiB or more waits under a key of its own (ARGV[11]), written just before this
-- call: as an argument, Redis's Lua would hash every byte of it (decisions/042). It is renamed to
-- KEYS[3] when this call finishes the job (the record's `resultSpilled` says so), else removed.
-- KEYS: the job's hash, its tombstone (which tenant it belonged to, kept after the record expires),
-- its result's key.
-- ARGV: status, finishedAt, HTTP status, result ('' when written apart), timing (JSON), version, retention
-- (s), tombstone retention (s), '1' to finish only a job no replica has started (a cancel), result
-- type or '', the key the result was written under or ''.
-- Returns 1 when this call finished it, else 0.
local spill = ARGV[11] or ''
local s = redis.call('HGET', KEYS[1], 'status')
local finishes = s and s ~= 'succeeded' and s ~= 'failed' and s ~= 'canceled' and (ARGV[9] ~= '1' or s == 'queued')
if not finishes then
  if spill ~= '' then redis.call('UNLINK', spill) end
  return 0
end
local status, httpStatus, result = ARGV[1], ARGV[3], ARGV[4]
if spill ~= '' then
  local moved = redis.pcall('RENAME', spill, KEYS[3])
  if type(moved) == 'table' and moved.err then
    -- Its write failed: the job fails, saying so, rather than succeed without its output.
    status, httpStatus, result = 'failed', '500', cjson.encode({ error = { code = 'result_lost', message = 'the result could not be stored; run the job again' } })
  else
    redis.call('EXPIRE', KEYS[3], ARGV[7])
    redis.call('HSET', KEYS[1], 'resultSpilled', '1')
  end
end
redis.call('HSET', KEYS[1], 'status', status, 'finishedAt', ARGV[2], 'httpStatus', httpStatus, 'result', result, 'timing', ARGV[5], 'version', ARGV[6], 'finishedBy', ARGV[9] == '1' and 'gateway' or 'replica')
if ARGV[10] ~= '' then redis.call('HSET', KEYS[1], 'type', ARGV[10]) end
redis.call('EXPIRE', KEYS[1], ARGV[7])
redis.call('SET', KEYS[2], redis.call('HGET', KEYS[1], 'tenant') or '', 'EX', ARGV[8])
return 1
