-- Moves the status only from one of the expected ones; the fields are set with it.
local s = redis.call('HGET', KEYS[1], 'status')
if not s then return nil end
local ok = false
for w in string.gmatch(ARGV[1], '[^,]+') do if w == s then ok = true end end
if not ok then return s end
for i = 2, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
return 'ok'
