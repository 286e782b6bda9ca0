-- The adds of one tick in one call: per entry, the XADD of its fields to its stream (its id) if
-- its API key (a field of KEYS[1]) exists and is not revoked, or UNKNOWN_KEY or REVOKED_KEY
-- instead, and, when the entry names its function, only while that function is deployed (a
-- member of KEYS[2], the registry's index), or FUNCTION_GONE instead: a delete (Registry.remove, one call too) is then
-- ordered against every add, so nothing is queued for a function that is gone, whatever a
-- gateway still has cached. A key and a function are each read once per call. One call per tick,
-- not one per request: a script call's own cost in Redis (wrapped in MULTI/EXEC there when the
-- append-only file is on) is most of what a request's add costs.
-- An entry that fails in Redis (a key record that is not JSON, a stream key of another type)
-- fails alone: { FAILED, error } in its place, the others queued as usual.
-- Each function queued to joins the set the scheduler watches (KEYS[3]).
-- An entry's large part (its binary body or input, core/live-entry.ts) waits under a key of its
-- own, written just before this call; a queued entry's is renamed to the name its id gives it
-- (spill_key), an entry not queued has it removed. Passed as an
-- argument instead, a large part would cost Redis a hash of every byte (Lua interns strings).
-- KEYS: the keys hash, the function index, the active set, then each entry's stream. ARGV per entry: key hash
-- ('' = no check), function name ('' = no check), its large part's key ('' = none), the number
-- of fields n, then its n fields.
-- #include spill-key
local UNKNOWN_KEY, REVOKED_KEY, KEY_VALID, FAILED, FUNCTION_GONE = {{UNKNOWN_KEY}}, {{REVOKED_KEY}}, {{KEY_VALID}}, {{FAILED}}, {{FUNCTION_GONE}}
local out, verdicts, deployed, marked = {}, {}, {}, {}
local a = 1
for i = 4, #KEYS do
  local hash, fn, spilled, n = ARGV[a], ARGV[a + 1], ARGV[a + 2], tonumber(ARGV[a + 3])
  local ok, r = pcall(function()
    if fn ~= '' then
      if deployed[fn] == nil then deployed[fn] = redis.call('SISMEMBER', KEYS[2], fn) == 1 end
      if not deployed[fn] then return FUNCTION_GONE end
    end
    local verdict = KEY_VALID
    if hash ~= '' then
      verdict = verdicts[hash]
      if verdict == nil then
        local key = redis.call('HGET', KEYS[1], hash)
        if not key then verdict = UNKNOWN_KEY elseif cjson.decode(key).revokedAt then verdict = REVOKED_KEY else verdict = KEY_VALID end
        verdicts[hash] = verdict
      end
    end
    if verdict ~= KEY_VALID then return verdict end
    local id = redis.call('XADD', KEYS[i], '*', unpack(ARGV, a + 4, a + 3 + n))
    -- Missing (its write failed), the entry still runs and is answered as damaged.
    if spilled ~= '' then redis.pcall('RENAME', spilled, spill_key(KEYS[i], id)) end
    -- The scheduler watches the function from now on (keys.active).
    if not marked[KEYS[i]] then
      marked[KEYS[i]] = true
      redis.call('SADD', KEYS[3], string.sub(KEYS[i], {{STREAM_NAME_START}}))
    end
    return id
  end)
  if ok then out[i - 3] = r else out[i - 3] = { FAILED, type(r) == 'table' and r.err or tostring(r) } end
  if spilled ~= '' and type(out[i - 3]) ~= 'string' then redis.call('UNLINK', spilled) end
  a = a + 4 + n
end
return out
