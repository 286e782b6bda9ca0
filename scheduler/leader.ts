// One scheduler leads at a time: a Redis key with expiry, renewed while alive. When the leader
// dies its key expires and another candidate takes over. A leader whose connection broke stops
// leading until it has checked the key again: after a Redis failover the key may be gone (it
// had not reached the replica) and another candidate may have taken it.
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
  ) {
    redis.on('close', () => (this.leading = false));
  }

  get isLeader(): boolean {
    return this.leading;
  }

  /** Takes or renews the lease; returns whether this candidate leads now. */
  async tick(): Promise<boolean> {
    // Renewed whether or not this candidate thought it led: the key outlives a broken connection.
    this.leading = (await evalScript(this.redis, RENEW, 1, keys.leader, this.id, this.ttlMs)) === 1;
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
