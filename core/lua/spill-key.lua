-- The key a live entry's large part waits under (keys.spillKey, core/live-entry.ts): its stream's function and its id.
local function spill_key(stream, id) return '{{SPILL_PREFIX}}' .. string.sub(stream, {{STREAM_NAME_START}}) .. ':' .. id end
