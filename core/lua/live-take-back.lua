-- Takes back a live entry its gateway no longer waits for (its caller left, or its wait ran out):
-- deleted when no replica has read it, so none ever runs it. One a replica holds stays: deleted
-- under it, the replica's next XCLAIM would drop it from the pending list, and its finishing
-- call would then neither acknowledge nor meter it. With a message, tells the function's
-- replicas (the cancel channel), so the one running it stops it.
-- Its part queued apart (core/live-entry.ts), if any, goes with it.
-- KEYS: the stream. ARGV: the group, the entry id, then the channel and message, or nothing.
-- Returns 1 when it deleted the entry.
-- #include spill-key
local held = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1)
local deleted = 0
if #held == 0 then
  deleted = redis.call('XDEL', KEYS[1], ARGV[2])
  redis.call('UNLINK', spill_key(KEYS[1], ARGV[2]))
end
if ARGV[3] then redis.call('PUBLISH', ARGV[3], ARGV[4]) end
return deleted
