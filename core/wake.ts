// Asking the leading scheduler to look at a function now, when work was queued for it: one
// `wake` event on the registry channel, at most once a second per function from each process —
// cheap, and enough to cut the scheduler's tick out of a cold start.
import type { Redis } from 'ioredis';
import type { PlatformEvent } from './contracts.ts';
import { keys } from './keys.ts';

const EVERY_MS = 1_000;

/** A wake for this process: the function's key in, at most one event a second per function out. */
export function waker(redis: Pick<Redis, 'publish'>, now: () => number = () => performance.now()): (name: string) => void {
  const last = new Map<string, number>();
  return (name) => {
    const t = now();
    if (t - (last.get(name) ?? -Infinity) < EVERY_MS) return;
    last.set(name, t);
    redis.publish(keys.registryChannel, JSON.stringify({ type: 'wake', name } satisfies PlatformEvent)).catch(() => {});
  };
}
