// The live lane: a function's synchronous and async requests ride one Redis stream, read by its
// replicas through one consumer group. Against a BullMQ job (five Lua scripts and five event
// stream entries per job, measured ~210 µs of Redis CPU per request), a request costs one XADD,
// its share of one XREADGROUP that hands a replica up to as many requests as it has free slots,
// and its share of one Lua call that finishes a tick's requests (usage, reply, XACK, XDEL). The
// group's pending list is the crash safety: an entry a replica read but never acknowledged is
// claimed by another once it has been idle for the lock time, and its delivery count tells how
// often that happened (runtime/replica/live-consumer.ts).
// Acknowledged entries are deleted, so the stream's length is what waits plus what runs, and
// its length less the group's pending count is what waits.
import type { Redis } from 'ioredis';
import { encodeReplies, type RunJobData } from './contracts.ts';
import { evalScript, flushWrites } from './redis.ts';
import { hourKey, monthKey, recordArgs, RECORD_FIELDS, RECORDS_MAX, type UsageRecord } from './usage.ts';
import { minuteKey, SERIES_TTL_S } from './series.ts';
import { lua } from './lua.ts';
import { QUEUED_TTL_S } from './jobs.ts';
import { liveFields, spillKeepMs, withSpilled, writeSpill, type LiveEntry } from './live-entry.ts';
import { baseKey } from './names.ts';
import { keys, liveStream, SCAN_NOW, spillKey, SPILL_PREFIX, STREAM_PREFIX, tenantKeys, usageKeys } from './keys.ts';

/** What scripts that delete entries need to remove their parts queued apart (spillKey). */
const SPILL_VALUES = { SPILL_PREFIX, STREAM_NAME_START: STREAM_PREFIX.length + 1 };

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

const HAND_OVER = lua('live-hand-over');

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

/** An entry a replica finishes: what it writes, and whether a part of it waits apart (hasSpilledPart). */
export interface FinishedEntry {
  id: string;
  outcome?: LiveOutcome;
  spilled?: boolean;
}

const FINISH = lua('live-finish', { RECORD_FIELDS, SERIES_TTL_S });

const NO_RECORD: string[] = new Array<string>(RECORD_FIELDS).fill('');

/**
 * Finishes entries this replica ran (see FINISH), in one round trip, then removes the parts
 * queued apart of those `spilled` (not before: unfinished, they run again). Resolves with, per
 * entry, whether this call acknowledged it.
 */
export async function finishLiveEntries(redis: Redis, fn: string, entries: FinishedEntry[]): Promise<boolean[]> {
  if (!entries.length) return [];
  const stream = liveStream(fn);
  const keys = [stream, usageKeys.records, usageKeys.tenants];
  const args: (string | Buffer)[] = [LIVE_GROUP, String(RECORDS_MAX)];
  // Replies to one gateway leave in one message.
  const byChannel = new Map<string, (string | Buffer)[]>();
  for (const { id, outcome } of entries) {
    if (outcome?.usage) keys.push(hourKey(outcome.usage), minuteKey(outcome.usage.fn, outcome.usage.at));
    else keys.push(stream, stream);
    args.push(id, ...(outcome?.usage ? recordArgs(outcome.usage) : NO_RECORD));
    if (!outcome?.reply) continue;
    const { channel, message } = outcome.reply;
    const list = byChannel.get(channel);
    if (list) list.push(message);
    else byChannel.set(channel, [message]);
  }
  for (const { outcome } of entries) keys.push(outcome?.usage ? monthKey(outcome.usage) : stream);
  for (const [channel, messages] of byChannel) args.push(channel, encodeReplies(messages));
  const acked = (await evalScript(redis, FINISH, keys.length, ...keys, ...args)) as number[];
  const spilled = entries.filter((e) => e.spilled).map((e) => spillKey(fn, e.id));
  // Left behind if this fails, they expire.
  if (spilled.length) await redis.unlink(...spilled).catch(() => 0);
  return acked.map((n) => n === 1);
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

/** What core/lua/live-add-many.lua answers for an entry it did not queue (for one it queued, the entry's id). */
const NOT_ADDED = { UNKNOWN_KEY: 0, REVOKED_KEY: 1, FAILED: 3, FUNCTION_GONE: 4 } as const;
const ADD_MANY = lua('live-add-many', { ...SPILL_VALUES, KEY_VALID: 2, ...NOT_ADDED });

/**
 * A tick's adds go out at once when they reach this many adds or bytes, and the next add starts
 * another call: one script call holds Redis for its whole length, and its arguments are spread
 * into one call.
 */
const ADD_TICK_MAX = 512;
const ADD_TICK_BYTES = 4 * 1024 * 1024;

interface PendingAdd {
  fn: string;
  keyHash: string;
  mustBeDeployed: boolean;
  fields: (string | Buffer)[];
  /** The large part, written just before the call (SPILL_MIN_BYTES), and for how long it is kept. */
  spill?: { value: string | Buffer; keepMs: number };
  resolve: (entry: string) => void;
  reject: (err: Error) => void;
}

/** XREADGROUP of up to `count` new entries for `consumer` (waiting up to `blockMs` for one when given). */
export async function readLiveEntries(redis: Redis, fn: string, consumer: string, count: number, blockMs?: number): Promise<LiveEntry[]> {
  // The typed command, not callBuffer: ioredis speaks RESP3 and shapes this reply (a map there)
  // as RESP2's list of [stream, entries] only for the commands it knows by name.
  const res = (
    blockMs === undefined
      ? await redis.xreadgroupBuffer('GROUP', LIVE_GROUP, consumer, 'COUNT', count, 'STREAMS', liveStream(fn), '>')
      : await redis.xreadgroupBuffer('GROUP', LIVE_GROUP, consumer, 'COUNT', count, 'BLOCK', blockMs, 'STREAMS', liveStream(fn), '>')
  ) as [Buffer, [Buffer, Buffer[]][]][] | null;
  return withSpilled(redis, fn, (res?.[0]?.[1] ?? []).map(([id, fields]) => [id.toString(), fields]));
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
    if (claimed) return { id, fields: (await withSpilled(redis, fn, [[id, claimed[1]]]))[0][1], deliveries: Number(count) + 1 };
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

const TAKE_UNSTARTED = lua('live-take-unstarted', SPILL_VALUES);

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

const HELD = lua('live-held');

const DROP_HELD = lua('live-drop-held', SPILL_VALUES);

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

const TAKE_BACK = lua('live-take-back', SPILL_VALUES);

/** The gateway's side: enqueue, take back a request nobody started, and read the depth. */
export class LiveQueue {
  private readonly grouped = new Set<string>();
  /** The adds of this tick, sent in its check phase as one script call (send). */
  private tick: PendingAdd[] = [];
  private tickBytes = 0;

  /** `keepAsyncMs`: how long an async run's large part waits for a replica (as long as a queued job's record). */
  constructor(
    private readonly redis: Redis,
    private readonly keepAsyncMs = QUEUED_TTL_S * 1000,
  ) {}

  /**
   * Queues a request; resolves with its entry id. `inputJson`: the JSON text `data.input` was
   * parsed from, written as it is (an ocr request's 200 KB body cost ~0.3–0.6 ms to stringify
   * again). With `keyHash` (the caller's API key, as the
   * gateway cached it), the request is only queued if that key is still there and not revoked,
   * checked in the same call: otherwise it throws KeyRejectedError and queues nothing. `body`:
   * a binary request body, stored as it is beside the JSON (data.raw names its input field).
   * Requests added in the same tick are queued in one call (ADD_MANY), each judged on its own.
   * `mustBeDeployed`: only while `fn` (a version key's function) is in the registry
   * (FunctionGoneError otherwise), checked in the same call.
   */
  async add(fn: string, data: RunJobData, o: { keyHash?: string; inputJson?: string; body?: Buffer; mustBeDeployed?: boolean } = {}): Promise<string> {
    if (!this.grouped.has(fn)) {
      await ensureLiveGroup(this.redis, fn);
      this.grouped.add(fn);
    }
    // An empty hash would mean "no check" to ADD_MANY.
    if (o.keyHash === '') throw new Error('LiveQueue.add: keyHash is empty');
    const { fields, spilled } = liveFields(data, o.inputJson, o.body);
    const bytes = [...fields, spilled ?? ''].reduce((n, f) => n + (typeof f === 'string' ? Buffer.byteLength(f) : f.length), 0);
    const spill = spilled === undefined ? undefined : { value: spilled, keepMs: spillKeepMs(data, this.keepAsyncMs) };
    // Requests queued in the same tick go in one call (ADD_MANY), sent in the tick's check phase.
    if (this.tick.length >= ADD_TICK_MAX || (this.tick.length && this.tickBytes + bytes > ADD_TICK_BYTES)) this.send();
    return new Promise<string>((resolve, reject) => {
      this.tick.push({ fn, keyHash: o.keyHash ?? '', mustBeDeployed: o.mustBeDeployed ?? false, fields, spill, resolve, reject });
      this.tickBytes += bytes;
      if (this.tick.length === 1) setImmediate(() => this.send());
    });
  }

  /** Sends the adds waiting, in one call, now (not at the end of the check phase: flushWrites). */
  private send(): void {
    const adds = this.tick;
    if (!adds.length) return;
    this.tick = [];
    this.tickBytes = 0;
    let sent: Promise<unknown>;
    // Written before the call, on the same connection: the call finds them there.
    const spills = adds.map((b) => (b.spill ? writeSpill(this.redis, b.spill.value, b.spill.keepMs) : ''));
    try {
      const ks = [tenantKeys.keysByHash, keys.functionIndex, keys.active, ...adds.map((b) => liveStream(b.fn))];
      const args = adds.flatMap((b, i) => [b.keyHash, b.mustBeDeployed ? baseKey(b.fn) : '', spills[i], String(b.fields.length), ...b.fields]);
      sent = evalScript(this.redis, ADD_MANY, ks.length, ...ks, ...args);
      flushWrites(this.redis);
    } catch (err) {
      sent = Promise.reject(err as Error);
    }
    sent.then(
      (out) => {
        (out as (string | number | [number, string])[]).forEach((r, i) => {
          const b = adds[i];
          if (Array.isArray(r)) b.reject(new Error(`Redis refused the entry: ${r[1]}`));
          else if (r === NOT_ADDED.UNKNOWN_KEY || r === NOT_ADDED.REVOKED_KEY) b.reject(new KeyRejectedError(b.keyHash, r === NOT_ADDED.REVOKED_KEY ? 'revoked' : 'unknown'));
          else if (r === NOT_ADDED.FUNCTION_GONE) b.reject(new FunctionGoneError(b.fn));
          else b.resolve(String(r));
        });
      },
      (err: Error) => {
        // Nothing was queued: the parts written for it go too (best effort; else they expire).
        const written = spills.filter(Boolean);
        if (written.length) this.redis.unlink(...written).catch(() => 0);
        for (const b of adds) b.reject(err);
      },
    );
  }

  /**
   * Takes back an entry its caller no longer waits for, if no replica has read it (TAKE_BACK): then
   * none ever runs it. `cancel`: tells the function's replicas, so one running it stops it (the
   * message the cancel channel carries, `<function> <request id>`). Resolves with whether it was taken back.
   */
  async takeBack(fn: string, entry: string, cancel?: string): Promise<boolean> {
    const args = cancel === undefined ? [] : [keys.cancelChannel, cancel];
    return (await evalScript(this.redis, TAKE_BACK, 1, liveStream(fn), LIVE_GROUP, entry, ...args)) === 1;
  }

  /** Requests no replica has taken yet: the stream's entries less those a replica holds. */
  async waiting(fn: string): Promise<number> {
    const res = await this.redis.multi().xlen(liveStream(fn)).xpending(liveStream(fn), LIVE_GROUP).exec();
    const [length, pending] = [res?.[0]?.[1] as number | undefined, res?.[1]?.[1] as [number] | undefined];
    // No group yet (nothing was ever queued) answers an error for XPENDING: nobody holds anything.
    return Math.max(0, (length ?? 0) - (typeof pending?.[0] === 'number' ? pending[0] : 0));
  }
}

/** The id a live request is metered under: its async job id, the id the gateway gave it, or its stream entry (unique within the function's stream). */
export const liveJobId = (fn: string, entry: string, data: RunJobData) => data.job ?? data.id ?? `${fn}:${entry}`;
