// The live lane: a function's synchronous and async requests ride one Redis stream, read by its
// replicas through one consumer group. Against a BullMQ job (five Lua scripts and five event
// stream entries per job, measured ~210 µs of Redis CPU per request), a request costs one XADD,
// its share of one XREADGROUP that hands a replica up to as many requests as it has free slots,
// and its share of one Lua call that finishes a tick's requests (usage, reply, XACK, XDEL). The
// group's pending list is the crash safety: an entry a replica read but never acknowledged is
// claimed by another once it has been idle for the lock time, and its delivery count tells how
// often that happened (runtime/live-consumer.ts).
// Acknowledged entries are deleted, so the stream's length is what waits plus what runs, and
// its length less the group's pending count is what waits.
import type { Redis } from 'ioredis';
import { encodeReplies, keys, SCAN_NOW, type RunJobData } from './contracts.ts';
import { evalScript, flushWrites } from './redis.ts';
import { tenantKeys } from './tenants.ts';
import { hourKey, recordArgs, RECORD_FIELDS, RECORDS_MAX, USAGE_LUA, usageKeys, type UsageRecord } from './usage.ts';

const STREAM_PREFIX = 'embers:stream:';
/** The stream of a function's live requests. */
export const liveStream = (fn: string) => `${STREAM_PREFIX}${fn}`;

/**
 * When a replica last took a request of the stream, in ms since the epoch, from its XINFO GROUPS
 * reply: the replicas' group's last-delivered-id, whose first part is the time the gateway added
 * the entry. Null if none was taken yet. What the scheduler learns idle times from: a request
 * that comes and goes between two of its passes never shows in the stream's length.
 */
export function lastTakenAt(groups: unknown): number | null {
  if (!Array.isArray(groups)) return null;
  for (const g of groups) {
    const o: Record<string, unknown> = {};
    if (Array.isArray(g)) for (let i = 0; i + 1 < g.length; i += 2) o[String(g[i])] = g[i + 1];
    else if (g && typeof g === 'object') Object.assign(o, g);
    if (o.name !== LIVE_GROUP) continue;
    const ms = Number(String(o['last-delivered-id'] ?? '').split('-')[0]);
    return ms > 0 ? ms : null;
  }
  return null;
}
/** Every replica of the function reads as one consumer of this group. */
export const LIVE_GROUP = 'replicas';

/** Creates the group (reading from the stream's start, so nothing added before is skipped); no-op when it exists. */
export async function ensureLiveGroup(redis: Redis, fn: string): Promise<void> {
  try {
    await redis.xgroup('CREATE', liveStream(fn), LIVE_GROUP, '0', 'MKSTREAM');
  } catch (err) {
    if (!String((err as Error).message).startsWith('BUSYGROUP')) throw err;
  }
}

/**
 * Removes a replica's consumer from the group, unless it still holds entries: deleting a consumer
 * drops its pending entries, and those must stay claimable by the other replicas. Resolves with
 * whether it is gone.
 */
export async function leaveLiveGroup(redis: Redis, fn: string, consumer: string): Promise<boolean> {
  const held = (await redis.xpending(liveStream(fn), LIVE_GROUP, '-', '+', 1, consumer)) as unknown[];
  if (held.length) return false;
  await redis.xgroup('DELCONSUMER', liveStream(fn), LIVE_GROUP, consumer);
  return true;
}

/**
 * Hands entries over: each one still pending with `ARGV[2]` (another replica may have taken it
 * over meanwhile: left alone) gets the idle time `ARGV[3]` ms, so the next look of any replica
 * takes it, with its delivery count as it is (the delivery ends as a crash would). The ids are
 * `ARGV[5…]`, or, with none given, every entry the consumer holds (a replica that died). When
 * any was handed over, `ARGV[4]` is published on the cancel channel (KEYS[2]): the function's
 * replicas look now instead of at their next tending.
 * KEYS: stream, channel; ARGV: group, consumer, idle ms, message, ids…
 */
const HAND_OVER = `
local held = {}
if #ARGV > 4 then
  for i = 5, #ARGV do
    local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1)[1]
    if p and p[2] == ARGV[2] then held[#held + 1] = p end
  end
else
  held = redis.pcall('XPENDING', KEYS[1], ARGV[1], '-', '+', 100000, ARGV[2])
  -- No stream or group (the function never had a live request): nothing held.
  if held.err then return 0 end
end
for _, p in ipairs(held) do
  redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, p[1], 'IDLE', ARGV[3], 'RETRYCOUNT', p[4], 'JUSTID')
end
if #held > 0 then redis.call('PUBLISH', KEYS[2], ARGV[4]) end
return #held`;

/** The idle time handed-over entries get: past any replica's lock time, so every replica's scan takes them. */
const HANDED_OVER_IDLE_MS = 24 * 3600_000;

/**
 * Makes the live entries `consumer` holds claimable by the function's other replicas now rather
 * than after the lock time, and tells them to look (`<fn> +scan` on the cancel channel). `ids`:
 * those entries (a replica handing over what it holds); none: every one it holds (its agent, once
 * the replica's process has exited). Resolves with how many were handed over.
 */
export async function handOverLiveEntries(redis: Redis, fn: string, consumer: string, ids?: string[]): Promise<number> {
  if (ids && !ids.length) return 0;
  const n = await evalScript(redis, HAND_OVER, 2, liveStream(fn), keys.cancelChannel, LIVE_GROUP, consumer, HANDED_OVER_IDLE_MS, `${fn} ${SCAN_NOW}`, ...(ids ?? []));
  return n as number;
}

/** What finishing a live entry writes besides its acknowledgement. */
export interface LiveOutcome {
  /** Metered only if this acknowledgement is the one that removes the entry from the pending list. */
  usage?: UsageRecord;
  /**
   * For a sync request's waiting gateway: published in the finishing call after the usage record,
   * or just before the call (LiveConsumer.flushFinished). Bytes when its body is (binary()).
   */
  reply?: { channel: string; message: string | Buffer };
}

/**
 * Finishes entries in one call: for each, XACK; when that acknowledged it (it was still pending:
 * no other replica finished it first) its usage record is written; its reply is published; and
 * the entry is deleted. The acknowledgement is the usage dedupe: a request run twice (taken over
 * from a replica that went silent, which then finished too) is metered by whichever finished
 * first. The reply goes out either way: a gateway takes the first reply and drops any other, and
 * one whose stream was lost with Redis's data still gets its answer. Replies to one gateway go
 * out as one message (encodeReplies), published last: a call that fails part way (Redis out of
 * memory) answers nobody, and the entries it did not finish run again. (A replica that finished a
 * lone request publishes its reply before this call instead: LiveConsumer.flushFinished.)
 * KEYS: stream, records stream, tenants set, then an hour key per entry (the stream when none).
 * ARGV: group, records cap, then per entry: id, RECORD_FIELDS (empty: no record); then per
 * gateway: channel, message.
 */
const FINISH = `${USAGE_LUA}
local stride = 1 + ${RECORD_FIELDS}
local n = #KEYS - 3
local out = {}
for i = 1, n do
  local a = 2 + (i - 1) * stride
  local id = ARGV[a + 1]
  local ok, acked = pcall(redis.call, 'XACK', KEYS[1], ARGV[1], id)
  out[i] = (ok and acked == 1) and 1 or 0
  if out[i] == 1 and ARGV[a + 2] ~= '' then add_record(KEYS[2], ARGV[2], KEYS[3 + i], a + 1) end
  redis.call('XDEL', KEYS[1], id)
end
roll_up(KEYS[3])
for j = 3 + n * stride, #ARGV, 2 do redis.call('PUBLISH', ARGV[j], ARGV[j + 1]) end
return out`;

const NO_RECORD: string[] = new Array<string>(RECORD_FIELDS).fill('');

/**
 * Finishes entries this replica ran (see FINISH), in one round trip. Resolves with, per entry,
 * whether this call acknowledged it.
 */
export async function finishLiveEntries(redis: Redis, fn: string, entries: { id: string; outcome?: LiveOutcome }[]): Promise<boolean[]> {
  if (!entries.length) return [];
  const stream = liveStream(fn);
  const keys = [stream, usageKeys.records, usageKeys.tenants];
  const args: (string | Buffer)[] = [LIVE_GROUP, String(RECORDS_MAX)];
  // Replies to one gateway leave in one message.
  const byChannel = new Map<string, (string | Buffer)[]>();
  for (const { id, outcome } of entries) {
    keys.push(outcome?.usage ? hourKey(outcome.usage) : stream);
    args.push(id, ...(outcome?.usage ? recordArgs(outcome.usage) : NO_RECORD));
    if (!outcome?.reply) continue;
    const { channel, message } = outcome.reply;
    const list = byChannel.get(channel);
    if (list) list.push(message);
    else byChannel.set(channel, [message]);
  }
  for (const [channel, messages] of byChannel) args.push(channel, encodeReplies(messages));
  const acked = (await evalScript(redis, FINISH, keys.length, ...keys, ...args)) as number[];
  return acked.map((n) => n === 1);
}

/**
 * Stream entries carry the job data as JSON in field `d`, and a binary request body as it came
 * in field `b` (data.raw names the input field it fills). Given `inputJson`, the JSON text
 * `data.input` was parsed from, that text is spliced in as the input instead of stringifying the
 * value again: parsing it gives the replica what the gateway parsed (and validated).
 */
export function encodeLiveJob(data: RunJobData, inputJson?: string): string {
  if (inputJson === undefined) return JSON.stringify(data);
  // JSON.stringify leaves out undefined members; padding around the body is not worth keeping.
  const rest = JSON.stringify({ ...data, input: undefined });
  return `${rest.length > 2 ? `${rest.slice(0, -1)},` : '{'}"input":${inputJson.trim()}}`;
}

/** LiveQueue.add found the function deleted (mustBeDeployed): nothing was queued. */
export class FunctionGoneError extends Error {
  constructor(readonly fn: string) {
    super(`function ${fn} was deleted`);
  }
}

/** LiveQueue.add found the caller's API key revoked or gone: nothing was queued. */
export class KeyRejectedError extends Error {
  constructor(
    readonly keyHash: string,
    readonly reason: 'revoked' | 'unknown',
  ) {
    super(`API key ${reason}`);
  }
}

/**
 * The adds of one tick in one call: per entry, the XADD of its fields to its stream if its API
 * key (a field of KEYS[1]) exists and is not revoked, or 0 (no such key) or 1 (revoked) instead,
 * and, when the entry names its function, only while that function is deployed (a member of
 * KEYS[2], the registry's index), or 4 instead: a delete (Registry.remove, one call too) is then
 * ordered against every add, so nothing is queued for a function that is gone, whatever a
 * gateway still has cached. A key and a function are each read once per call. One call per tick
 * instead of one per request: a script call's own cost in Redis (with the append-only file on,
 * each one's effects are also wrapped in MULTI/EXEC there) came to ~10 µs of the ~13 µs an
 * `echo` request's add cost, against ~1.5 µs for its HGET and XADD.
 * An entry that fails in Redis (a key record that is not JSON, a stream key of another type)
 * fails alone: { 3, error } in its place, the others queued as usual.
 * Each function queued to joins the set the scheduler watches (KEYS[3]).
 * KEYS: the keys hash, the function index, the active set, then each entry's stream. ARGV per entry: key hash
 * ('' = no check), function name ('' = no check), the number of fields n, then its n fields.
 */
const ADD_MANY = `
local out, verdicts, deployed, marked = {}, {}, {}, {}
local a = 1
for i = 4, #KEYS do
  local hash, fn, n = ARGV[a], ARGV[a + 1], tonumber(ARGV[a + 2])
  local ok, r = pcall(function()
    if fn ~= '' then
      if deployed[fn] == nil then deployed[fn] = redis.call('SISMEMBER', KEYS[2], fn) == 1 end
      if not deployed[fn] then return 4 end
    end
    local verdict = 2
    if hash ~= '' then
      verdict = verdicts[hash]
      if verdict == nil then
        local key = redis.call('HGET', KEYS[1], hash)
        if not key then verdict = 0 elseif cjson.decode(key).revokedAt then verdict = 1 else verdict = 2 end
        verdicts[hash] = verdict
      end
    end
    if verdict ~= 2 then return verdict end
    local id = redis.call('XADD', KEYS[i], '*', unpack(ARGV, a + 3, a + 2 + n))
    -- The scheduler watches the function from now on (keys.active).
    if not marked[KEYS[i]] then
      marked[KEYS[i]] = true
      redis.call('SADD', KEYS[3], string.sub(KEYS[i], ${STREAM_PREFIX.length + 1}))
    end
    return id
  end)
  if ok then out[i - 3] = r else out[i - 3] = { 3, type(r) == 'table' and r.err or tostring(r) } end
  a = a + 3 + n
end
return out`;

/**
 * A batch is sent as it is once it holds this many adds or bytes, and the next add starts another:
 * one script call holds Redis for its whole length, and its arguments are spread into one call.
 */
const ADD_BATCH_MAX = 512;
const ADD_BATCH_BYTES = 4 * 1024 * 1024;

interface PendingAdd {
  fn: string;
  keyHash: string;
  mustBeDeployed: boolean;
  fields: (string | Buffer)[];
  resolve: (entry: string) => void;
  reject: (err: Error) => void;
}

/**
 * A stream entry as replicas read it: its fields as Buffers, never as text, because a binary
 * request body (field `b`) would not survive decoding as UTF-8.
 */
export type LiveEntry = [id: string, fields: Buffer[]];

/** XREADGROUP of up to `count` new entries for `consumer` (waiting up to `blockMs` for one when given). */
export async function readLiveEntries(redis: Redis, fn: string, consumer: string, count: number, blockMs?: number): Promise<LiveEntry[]> {
  // The typed command, not callBuffer: ioredis speaks RESP3 and shapes this reply (a map there)
  // as RESP2's list of [stream, entries] only for the commands it knows by name.
  const res = (
    blockMs === undefined
      ? await redis.xreadgroupBuffer('GROUP', LIVE_GROUP, consumer, 'COUNT', count, 'STREAMS', liveStream(fn), '>')
      : await redis.xreadgroupBuffer('GROUP', LIVE_GROUP, consumer, 'COUNT', count, 'BLOCK', blockMs, 'STREAMS', liveStream(fn), '>')
  ) as [Buffer, [Buffer, Buffer[]][]][] | null;
  return (res?.[0]?.[1] ?? []).map(([id, fields]) => [id.toString(), fields]);
}

/** A request taken over from another consumer: its fields, and how many replicas it was handed to, this one included. */
export interface TakenOver {
  id: string;
  fields: Buffer[];
  deliveries: number;
}

/**
 * Takes for `consumer` the oldest entry idle for `minIdleMs` (its replica went silent, or handed
 * it over), with its delivery count raised: XPENDING's IDLE filter finds it without claiming
 * anything else, XCLAIM takes it if it is still idle that long. One taken meanwhile by another
 * replica, or deleted (XCLAIM drops a deleted entry from the pending list), is passed over.
 * XCLAIM's reply is plain arrays in RESP3 too, so callBuffer reads it as it is.
 */
export async function claimLiveEntry(redis: Redis, fn: string, consumer: string, minIdleMs: number): Promise<TakenOver | undefined> {
  for (let tries = 0; tries < CLAIM_TRIES; tries++) {
    const idle = await oldestIdle(redis, fn, minIdleMs);
    if (!idle) return undefined;
    const [id, , , count] = idle;
    const [claimed] = (await redis.callBuffer('XCLAIM', [liveStream(fn), LIVE_GROUP, consumer, minIdleMs, id])) as ([Buffer, Buffer[]] | null)[];
    // XCLAIM counts this delivery.
    if (claimed) return { id, fields: claimed[1], deliveries: Number(count) + 1 };
  }
  return undefined;
}

/** Whether an entry has been idle for `minIdleMs` (claimLiveEntry would take one), without claiming it. */
export async function hasLiveEntryToClaim(redis: Redis, fn: string, minIdleMs: number): Promise<boolean> {
  return (await oldestIdle(redis, fn, minIdleMs)) !== undefined;
}

/** The oldest pending entry idle for `minIdleMs` (XPENDING's IDLE filter): id, consumer, idle ms, deliveries. */
async function oldestIdle(redis: Redis, fn: string, minIdleMs: number): Promise<[string, string, number, number] | undefined> {
  const idle = (await redis.xpending(liveStream(fn), LIVE_GROUP, 'IDLE', minIdleMs, '-', '+', 1)) as [string, string, number, number][];
  return idle[0];
}

/** Entries claimLiveEntry passes over (taken meanwhile, or deleted) before it leaves the rest to the next look. */
const CLAIM_TRIES = 16;

/**
 * An entry's job (field `d`), with its binary body (field `b`, if any) set as `input[data.raw]`;
 * `bodyMissing` set when `data.raw` names a body the entry does not have.
 */
export function decodeLiveJob(fields: Buffer[]): RunJobData | undefined {
  let d: Buffer | undefined;
  let b: Buffer | undefined;
  for (let i = 0; i + 1 < fields.length; i += 2) {
    const name = fields[i].toString();
    if (name === 'd') d = fields[i + 1];
    else if (name === 'b') b = fields[i + 1];
  }
  if (d === undefined) return undefined;
  const data = JSON.parse(d.toString()) as RunJobData;
  if (data.raw !== undefined) {
    if (typeof data.input !== 'object' || data.input === null) return undefined;
    // A damaged entry still names who waits for it: they get an answer, not silence.
    if (b === undefined) data.bodyMissing = true;
    else (data.input as Record<string, unknown>)[data.raw] = b;
  }
  return data;
}

/**
 * Takes out, in one call, up to ARGV[2] entries after ARGV[3] (an id; '-' from the start) that no
 * replica has read (not in the group's pending list), and returns the id of the last entry looked
 * at ('' when none was) followed by the job field (`d`) of each one taken out. One call, so no
 * replica reads an entry between the look and the delete; pages, so a long queue neither blocks
 * Redis nor arrives in one reply.
 * KEYS: stream; ARGV: group, page size, after.
 */
/** Lua: the job field (`d`) of an entry's field list, '' when it has none. */
const JOB_FIELD_LUA = `
local function job_field(fields)
  for j = 1, #fields, 2 do if fields[j] == 'd' then return fields[j + 1] end end
  return ''
end`;

const TAKE_UNSTARTED = `${JOB_FIELD_LUA}
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
return out`;

/** Entries TAKE_UNSTARTED looks at per call. */
const UNSTARTED_PAGE = 64;

/**
 * Removes every entry of the function's stream that no replica has started, page by page, and
 * yields each one's job (undefined when its record cannot be read). For a function being deleted:
 * with its adds refused (mustBeDeployed), the pages end.
 */
export async function* takeUnstarted(redis: Redis, fn: string): AsyncGenerator<RunJobData | undefined> {
  let after = '-';
  for (;;) {
    const [last, ...jobs] = (await evalScript(redis, TAKE_UNSTARTED, 1, liveStream(fn), LIVE_GROUP, String(UNSTARTED_PAGE), after)) as string[];
    for (const d of jobs) yield parseJob(d);
    if (!last) return;
    after = last;
  }
}

/**
 * The entries the consumer ARGV[2] holds, in one call: id, then job field (`d`; '' for one
 * already deleted from the stream), for each. KEYS: stream; ARGV: group, consumer.
 */
const HELD = `${JOB_FIELD_LUA}
local held = redis.pcall('XPENDING', KEYS[1], ARGV[1], '-', '+', 100000, ARGV[2])
if held.err then return {} end
local out = {}
for _, p in ipairs(held) do
  local e = redis.call('XRANGE', KEYS[1], p[1], p[1])[1]
  out[#out + 1] = p[1]
  out[#out + 1] = e and job_field(e[2]) or ''
end
return out`;

/** Acknowledges and deletes each of ARGV[3…] still pending with the consumer ARGV[2]. KEYS: stream; ARGV: group, consumer, ids… */
const DROP_HELD = `
for i = 3, #ARGV do
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1)[1]
  if p and p[2] == ARGV[2] then
    redis.call('XACK', KEYS[1], ARGV[1], ARGV[i])
    redis.call('XDEL', KEYS[1], ARGV[i])
  end
end
return 0`;

/**
 * What a consumer holds (a replica of a deleted function that stopped before finishing it: nobody
 * else will run it), each with its job (undefined when it cannot be read). Nothing is taken:
 * once they are answered, dropHeld removes them, so a failure in between leaves them held.
 */
export async function heldBy(redis: Redis, fn: string, consumer: string): Promise<{ id: string; data?: RunJobData }[]> {
  const flat = (await evalScript(redis, HELD, 1, liveStream(fn), LIVE_GROUP, consumer)) as string[];
  const out: { id: string; data?: RunJobData }[] = [];
  for (let i = 0; i + 1 < flat.length; i += 2) out.push({ id: flat[i], data: parseJob(flat[i + 1]) });
  return out;
}

/** Acknowledges and deletes those of `ids` the consumer still holds (after heldBy's were answered). */
export async function dropHeld(redis: Redis, fn: string, consumer: string, ids: string[]): Promise<void> {
  if (ids.length) await evalScript(redis, DROP_HELD, 1, liveStream(fn), LIVE_GROUP, consumer, ...ids);
}

/** An entry's job field, or undefined when it is missing or not JSON. */
function parseJob(d: string): RunJobData | undefined {
  try {
    return d ? (JSON.parse(d) as RunJobData) : undefined;
  } catch {
    return undefined;
  }
}

/** The gateway's side: enqueue, take back a request nobody started, and read the depth. */
export class LiveQueue {
  private readonly grouped = new Set<string>();
  /** Adds of this tick, waiting for its check phase (send). */
  private batch: PendingAdd[] = [];
  private batchBytes = 0;

  constructor(private readonly redis: Redis) {}

  /**
   * Queues a request; resolves with its entry id. `inputJson`: the JSON text `data.input` was
   * parsed from, written as it is (an ocr request's 200 KB body cost ~0.3–0.6 ms to stringify
   * again). With `keyHash` (the caller's API key, as the
   * gateway cached it), the request is only queued if that key is still there and not revoked,
   * checked in the same call: otherwise it throws KeyRejectedError and queues nothing. `body`:
   * a binary request body, stored as it is beside the JSON (data.raw names its input field).
   * Requests added in the same tick are queued in one call (ADD_MANY), each judged on its own.
   * `mustBeDeployed`: only while `fn` is in the registry (FunctionGoneError otherwise), checked
   * in the same call.
   */
  async add(fn: string, data: RunJobData, o: { keyHash?: string; inputJson?: string; body?: Buffer; mustBeDeployed?: boolean } = {}): Promise<string> {
    if (!this.grouped.has(fn)) {
      await ensureLiveGroup(this.redis, fn);
      this.grouped.add(fn);
    }
    // An empty hash would mean "no check" to ADD_MANY.
    if (o.keyHash === '') throw new Error('LiveQueue.add: keyHash is empty');
    const fields: (string | Buffer)[] = ['d', encodeLiveJob(data, o.inputJson)];
    if (o.body) fields.push('b', o.body);
    const bytes = fields.reduce((n, f) => n + (typeof f === 'string' ? Buffer.byteLength(f) : f.length), 0);
    // Requests queued in the same tick go in one call (ADD_MANY), sent in the tick's check phase.
    if (this.batch.length >= ADD_BATCH_MAX || (this.batch.length && this.batchBytes + bytes > ADD_BATCH_BYTES)) this.send();
    return new Promise<string>((resolve, reject) => {
      this.batch.push({ fn, keyHash: o.keyHash ?? '', mustBeDeployed: o.mustBeDeployed ?? false, fields, resolve, reject });
      this.batchBytes += bytes;
      if (this.batch.length === 1) setImmediate(() => this.send());
    });
  }

  /** Sends the adds waiting, in one call, now (not at the end of the check phase: flushWrites). */
  private send(): void {
    const batch = this.batch;
    if (!batch.length) return;
    this.batch = [];
    this.batchBytes = 0;
    let sent: Promise<unknown>;
    try {
      const ks = [tenantKeys.keysByHash, keys.functionIndex, keys.active, ...batch.map((b) => liveStream(b.fn))];
      const args = batch.flatMap((b) => [b.keyHash, b.mustBeDeployed ? b.fn : '', String(b.fields.length), ...b.fields]);
      sent = evalScript(this.redis, ADD_MANY, ks.length, ...ks, ...args);
      flushWrites(this.redis);
    } catch (err) {
      sent = Promise.reject(err as Error);
    }
    sent.then(
      (out) => {
        (out as (string | number | [number, string])[]).forEach((r, i) => {
          const b = batch[i];
          if (Array.isArray(r)) b.reject(new Error(`Redis refused the entry: ${r[1]}`));
          else if (r === 0 || r === 1) b.reject(new KeyRejectedError(b.keyHash, r === 1 ? 'revoked' : 'unknown'));
          else if (r === 4) b.reject(new FunctionGoneError(b.fn));
          else b.resolve(String(r));
        });
      },
      (err: Error) => {
        for (const b of batch) b.reject(err);
      },
    );
  }

  /** Deletes the entry: a replica that has not read it never will; one that has, finishes it anyway. */
  async remove(fn: string, entry: string): Promise<void> {
    await this.redis.xdel(liveStream(fn), entry);
  }

  /** Requests no replica has taken yet: the stream's entries less those a replica holds. */
  async waiting(fn: string): Promise<number> {
    const res = await this.redis.multi().xlen(liveStream(fn)).xpending(liveStream(fn), LIVE_GROUP).exec();
    const [length, pending] = [res?.[0]?.[1] as number | undefined, res?.[1]?.[1] as [number] | undefined];
    // No group yet (nothing was ever queued) answers an error for XPENDING: nobody holds anything.
    return Math.max(0, (length ?? 0) - (typeof pending?.[0] === 'number' ? pending[0] : 0));
  }
}
