// Which functions the scheduler looks at on a pass: those that may have work (keys.active: a
// gateway adds a function as it queues a request, a deploy as it lands) and those it still has
// reason to watch (replicas, a keep-alive or pre-warm under way). A function with none of these
// leaves the list, and deployed functions at zero cost a pass nothing.
import type { Redis } from 'ioredis';
import { keys } from '../core/contracts.ts';
import { liveStream } from '../core/live-queue.ts';
import { evalScript } from '../core/redis.ts';

/** Leaves the active set only while its stream is empty: a request queued meanwhile keeps it. KEYS: active set, stream; ARGV: fn. */
const UNWATCH = `
if redis.call('XLEN', KEYS[2]) > 0 then return 0 end
return redis.call('SREM', KEYS[1], ARGV[1])`;

export class Watchlist {
  private readonly watched = new Set<string>();

  constructor(private readonly redis: Redis) {}

  /** Watches `fn` from the next pass (a wake naming it, a batch feeding it). */
  add(fn: string): void {
    this.watched.add(fn);
  }

  /** Everything deployed, once: a new leader does not know what its predecessor watched. */
  async seedAll(): Promise<void> {
    for (const fn of await this.redis.smembers(keys.functionIndex)) this.watched.add(fn);
  }

  /** The functions to look at on this pass. */
  async names(): Promise<string[]> {
    for (const fn of await this.redis.smembers(keys.active)) this.watched.add(fn);
    return [...this.watched];
  }

  /** Stops watching `fn` (it has no work, no replica, nothing to keep warm, or it was deleted). */
  async drop(fn: string): Promise<void> {
    this.watched.delete(fn);
    await evalScript(this.redis, UNWATCH, 2, keys.active, liveStream(fn), fn);
  }

  get size(): number {
    return this.watched.size;
  }
}
