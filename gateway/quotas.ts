// Back-pressure: per-key requests per second and requests in flight (shared by every gateway
// through Redis), and a per-function cap on waiting requests (Triton's max_queue_size).
// All answer 429 with Retry-After. A key without limits costs no Redis round trip here.
import type { Redis } from 'ioredis';
import type { LiveQueue } from '../core/live-queue.ts';
import type { AuthContext } from '../core/tenants.ts';
import { ApiError } from './errors.ts';
import { evalScript } from '../core/redis.ts';

/** Fixed one-second windows: INCR and expire in one call. */
const RATE = `
local n = redis.call('INCR', KEYS[1])
if n == 1 then redis.call('PEXPIRE', KEYS[1], 2000) end
return n`;

/** In-flight slots as a sorted set of request id → expiry, so a gateway that dies leaks nothing for long. */
const ACQUIRE = `
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then return 0 end
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return 1`;

const tooMany = (code: string, message: string, retryAfterS: number) => {
  const err = new ApiError(429, code, message, { retryAfterSeconds: retryAfterS });
  return Object.assign(err, { retryAfter: retryAfterS });
};

/** Throws 429 when the key has used its requests for this second. */
export async function checkRate(redis: Redis, auth: AuthContext): Promise<void> {
  const rps = auth.limits?.rps;
  if (!rps) return;
  const second = Math.floor(Date.now() / 1000);
  const n = (await evalScript(redis, RATE, 1, `embers:quota:rate:${auth.tenant}:${auth.keyId}:${second}`)) as number;
  if (n > rps) throw tooMany('rate_limited', `key ${auth.keyId} is limited to ${rps} requests per second; retry after the Retry-After header's seconds`, 1);
}

/** Takes one of the key's in-flight slots for `rid`; returns its release. Throws 429 when none is free. */
export async function acquireSlot(redis: Redis, auth: AuthContext, rid: string, holdMs: number): Promise<() => void> {
  const limit = auth.limits?.concurrency;
  if (!limit) return () => {};
  const key = `embers:quota:inflight:${auth.tenant}:${auth.keyId}`;
  const now = Date.now();
  const ok = (await evalScript(redis, ACQUIRE, 1, key, String(now), String(limit), String(now + holdMs), rid, String(holdMs))) as number;
  if (!ok) throw tooMany('too_many_in_flight', `key ${auth.keyId} may have ${limit} requests in flight at once; retry when one finishes`, 1);
  return () => void redis.zrem(key, rid).catch(() => 0);
}

/** A length read more than 250 ms ago is read again; one under half the limit still judges requests while that read runs, up to this age. */
const FRESH_MS = 250;
const STALE_MAX_MS = 5_000;

/**
 * Waiting live requests per function, read at most every 250 ms per gateway while Redis answers
 * (after a failed read, the next request reads again): cheap, and close enough for back-pressure.
 * A stale length under half the limit (and under 5 s old) judges the requests that come while a
 * fresh one is read: at c = 1 every fifth `ocr` request waited for that round trip (~0.4 ms)
 * before being queued. Near the limit, never read, or older, a request waits for the fresh length.
 */
export class QueueDepth {
  /** Per function: the last length read and when (`at` undefined: never), and the read under way. */
  private readonly cache = new Map<string, Depth>();
  constructor(
    private readonly live: Pick<LiveQueue, 'waiting'>,
    private readonly now: () => number = () => performance.now(),
  ) {}

  async check(fn: string, max: number): Promise<void> {
    const n = await this.read(fn, max);
    if (n >= max) throw tooMany('queue_full', `${fn} has ${n} requests waiting (its maxQueueLength is ${max}); retry shortly`, 1);
  }

  private read(fn: string, max: number): number | Promise<number> {
    let depth = this.cache.get(fn);
    if (!depth) this.cache.set(fn, (depth = { n: 0 }));
    const age = depth.at === undefined ? Infinity : this.now() - depth.at;
    if (age < FRESH_MS) return depth.n;
    const reading = (depth.reading ??= this.refresh(fn, depth));
    return age < STALE_MAX_MS && depth.n < max / 2 ? depth.n : reading;
  }

  /** Reads the length into `depth`; a failed read leaves the last one, and the next request reads again. */
  private refresh(fn: string, depth: Depth): Promise<number> {
    const reading = this.live
      .waiting(fn)
      .then((n) => {
        depth.n = n;
        depth.at = this.now();
        return n;
      })
      .finally(() => (depth.reading = undefined));
    // Nobody may wait for a background reading: its failure must not go unhandled.
    reading.catch(() => {});
    return reading;
  }
}

interface Depth {
  n: number;
  at?: number;
  reading?: Promise<number>;
}
