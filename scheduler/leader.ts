// One scheduler leads at a time: a Redis key with expiry, renewed while alive. When the leader
// dies its key expires and another candidate takes over.
import type { Redis } from 'ioredis';
import { evalScript } from '../core/redis.ts';
import { lua } from '../core/lua.ts';
import { keys } from '../core/keys.ts';

const RENEW = lua('leader-renew');
const RELEASE = lua('leader-release');

export class LeaderLease {
  private leading = false;

  constructor(
    private readonly redis: Redis,
    readonly id: string,
    private readonly ttlMs = 5_000,
  ) {}

  get isLeader(): boolean {
    return this.leading;
  }

  /** Takes or renews the lease; returns whether this candidate leads now. */
  async tick(): Promise<boolean> {
    if (this.leading) {
      this.leading = (await evalScript(this.redis, RENEW, 1, keys.leader, this.id, this.ttlMs)) === 1;
    }
    if (!this.leading) {
      this.leading = (await this.redis.set(keys.leader, this.id, 'PX', this.ttlMs, 'NX')) === 'OK';
    }
    return this.leading;
  }

  async release(): Promise<void> {
    if (!this.leading) return;
    this.leading = false;
    await evalScript(this.redis, RELEASE, 1, keys.leader, this.id);
  }
}
