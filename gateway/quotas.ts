// Back-pressure: per-key requests per second and requests in flight (shared by every gateway
// through Redis), and a per-function cap on waiting requests (Triton's max_queue_size): 429 with
// Retry-After. A key without limits costs no Redis round trip here. And Redis's memory, which
// holds the queued bodies: 503 with Retry-After (RedisMemory).
import type { Redis } from 'ioredis';
import type { LiveQueue } from '../core/live-queue.ts';
import type { AuthContext } from '../core/tenants.ts';
import { ApiError } from './errors.ts';
import { evalScript } from '../core/redis.ts';
import { lua } from '../core/lua.ts';
import { quotaKeys } from '../core/keys.ts';

const RATE = lua('quota-rate');

const ACQUIRE = lua('quota-acquire');

/** A refusal with Retry-After (the error handler sets the header from `retryAfter`). */
export const refusal = (status: 429 | 503, code: string, message: string, retryAfterS: number) => {
  const err = new ApiError(status, code, message, { retryAfterSeconds: retryAfterS });
  return Object.assign(err, { retryAfter: retryAfterS });
};

const tooMany = (code: string, message: string, retryAfterS: number) => refusal(429, code, message, retryAfterS);

/** Throws 429 when the key has used its requests for this second. */
export async function checkRate(redis: Redis, auth: AuthContext): Promise<void> {
  const rps = auth.limits?.rps;
  if (!rps) return;
  const second = Math.floor(Date.now() / 1000);
  const n = (await evalScript(redis, RATE, 1, quotaKeys.rate(auth.tenant, auth.keyId, second))) as number;
  if (n > rps) throw tooMany('rate_limited', `key ${auth.keyId} is limited to ${rps} requests per second; retry after the Retry-After header's seconds`, 1);
}

/** Takes one of the key's in-flight slots for `member` (the request's own unique id); returns its release. Throws 429 when none is free. */
export async function acquireSlot(redis: Redis, auth: AuthContext, member: string, holdMs: number): Promise<() => void> {
  const limit = auth.limits?.concurrency;
  if (!limit) return () => {};
  const key = quotaKeys.inFlight(auth.tenant, auth.keyId);
  const now = Date.now();
  const ok = (await evalScript(redis, ACQUIRE, 1, key, String(now), String(limit), String(now + holdMs), member, String(holdMs))) as number;
  if (!ok) throw tooMany('too_many_in_flight', `key ${auth.keyId} may have ${limit} requests in flight at once; retry when one finishes`, 1);
  return () => void redis.zrem(key, member).catch(() => 0);
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

/** Where the Redis memory budget came from, for the refusal's message. */
type BudgetSource = 'setting' | 'maxmemory' | 'machine';

/**
 * Admission by Redis's memory: a run whose body would take Redis's used memory past the budget is
 * answered 503 and not queued. Waiting requests ride in Redis with their bodies, and a flood of
 * large ones (10,000 × 10 MiB fits `maxQueueLength`) would otherwise grow it until the machine
 * kills it, and every queued request with it. No `maxmemory` is set for this: at that limit Redis
 * refuses the platform's own writes too (heartbeats, job records), so the refusal happens here,
 * below it, and what is queued still drains. The budget: EMBERS_REDIS_MEMORY_LIMIT_MB; else 90 %
 * of Redis's `maxmemory` when it has one; else half the memory of Redis's machine.
 * `used_memory` is read at most every 250 ms (INFO memory, O(1)); bytes this gateway queued since
 * the last read are added to it, so a burst inside one read's age is counted too. A failed read
 * admits (the enqueue will answer 503 itself if Redis is gone).
 */
export class RedisMemory {
  private used = 0;
  private budget?: number;
  private source: BudgetSource = 'machine';
  private at?: number;
  /** Bytes admitted since the last read began: not in `used` yet. */
  private since = 0;
  private reading?: Promise<void>;

  constructor(
    private readonly redis: { info(section: 'memory'): Promise<string> },
    private readonly limitBytes?: number,
    private readonly now: () => number = () => performance.now(),
  ) {}

  async check(bytes: number): Promise<void> {
    const age = this.at === undefined ? Infinity : this.now() - this.at;
    if (age >= FRESH_MS) {
      const reading = (this.reading ??= this.refresh());
      // A stale read judges while the next runs, unless there is none yet, it is old, or the
      // budget is close.
      if (age >= STALE_MAX_MS || (this.budget !== undefined && this.used + this.since > this.budget / 2)) await reading;
    }
    const budget = this.budget;
    if (budget !== undefined && this.used + this.since + bytes > budget) {
      const mb = (n: number) => (n / 2 ** 20).toFixed(n < 10 * 2 ** 20 ? 1 : 0);
      const where = { setting: 'EMBERS_REDIS_MEMORY_LIMIT_MB', maxmemory: "90 % of Redis's maxmemory; EMBERS_REDIS_MEMORY_LIMIT_MB sets another", machine: "half the memory of Redis's machine; EMBERS_REDIS_MEMORY_LIMIT_MB sets another" }[this.source];
      throw refusal(503, 'redis_full', `Redis holds ${mb(this.used + this.since)} MB of queued requests and results, and this request's ${mb(bytes)} MB would take it past the platform's limit of ${mb(budget)} MB (${where}); nothing was queued: retry once queued work has drained`, 1);
    }
    this.since += bytes;
  }

  private refresh(): Promise<void> {
    const admitted = this.since;
    const reading = this.redis
      .info('memory')
      .then((text) => {
        const field = (name: string) => Number(new RegExp(`^${name}:(\\d+)`, 'm').exec(text)?.[1] ?? 0);
        const [used, maxmemory, machine] = [field('used_memory'), field('maxmemory'), field('total_system_memory')];
        this.used = used;
        this.since = Math.max(0, this.since - admitted);
        this.at = this.now();
        if (this.limitBytes !== undefined) [this.budget, this.source] = [this.limitBytes, 'setting'];
        else if (maxmemory > 0) [this.budget, this.source] = [0.9 * maxmemory, 'maxmemory'];
        else if (machine > 0) [this.budget, this.source] = [machine / 2, 'machine'];
        else this.budget = undefined;
      })
      .catch(() => {})
      .finally(() => (this.reading = undefined));
    return reading;
  }
}
