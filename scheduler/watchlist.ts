// Which functions the scheduler looks at on a pass: those that may have work (keys.active: a
// gateway adds a function as it queues a request, a deploy as it lands) and those it still has
// reason to watch (replicas, a keep-alive or pre-warm under way). A function with none of these
// leaves the list, and deployed functions at zero cost a pass nothing.
import type { Redis } from 'ioredis';
import { evalScript } from '../core/redis.ts';
import { lua } from '../core/lua.ts';
import { keys, liveStream } from '../core/keys.ts';

const UNWATCH = lua('watchlist-unwatch');

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
