// How long a node waits before replacing a replica whose user code failed while serving: broke its
// channel, crashed, ran out of memory, would not stop (decisions/020, 007). Each failure of the
// function, whatever its version, doubles the wait, from 1 s up to a minute, and a function
// forgets its failures after five minutes without one. Unlike a start's backoff, a replica
// becoming ready does not reset it: a tenant whose code fails as soon as it serves would
// otherwise make the node pay a cold start every second, at its neighbours' expense.
import { systemClock, type Clock } from '../core/clock.ts';

export interface RestartPenaltyOptions {
  baseMs?: number;
  maxMs?: number;
  forgetAfterMs?: number;
  clock?: Clock;
}

export class RestartPenalty {
  private readonly breaks = new Map<string, { count: number; at: number; until: number }>();
  private readonly clock: Clock;

  constructor(private readonly o: RestartPenaltyOptions = {}) {
    this.clock = o.clock ?? systemClock;
  }

  /** One more failure of `key` (a function): how long until it may be replaced (ms). */
  record(key: string): number {
    const now = this.clock.now();
    const last = this.breaks.get(key);
    const count = last && now - last.at < (this.o.forgetAfterMs ?? 300_000) ? last.count + 1 : 1;
    const wait = Math.min(this.o.maxMs ?? 60_000, (this.o.baseMs ?? 1000) * 2 ** (count - 1));
    this.breaks.set(key, { count, at: now, until: now + wait });
    return wait;
  }

  /** Whether `key` must wait before another replica starts. */
  waiting(key: string): boolean {
    const b = this.breaks.get(key);
    return b !== undefined && this.clock.now() < b.until;
  }
}
