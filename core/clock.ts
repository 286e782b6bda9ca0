// Queue time to the microsecond between two processes on one machine. A request's enqueue time
// (RunJobData.enq) is Date.now(): whole milliseconds, so Server-Timing's `queue` read 0 or 1 ms at
// low load. The gateway also stamps CLOCK_MONOTONIC (process.hrtime), which every process of one
// boot shares, with that boot's id; a replica on the same boot subtracts monotonic readings, any
// other (another machine, a platform without /proc) the wall clock as before.
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';

/** This boot's id, shortened (Linux); elsewhere a per-process one, which no other process matches. */
export const BOOT_ID: string = (() => {
  try {
    return readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim().replace(/-/g, '').slice(0, 16);
  } catch {
    return `p${randomUUID().replace(/-/g, '').slice(0, 15)}`;
  }
})();

/** CLOCK_MONOTONIC in ms, fractional. */
export const monoMs = (): number => Number(process.hrtime.bigint()) / 1e6;

/** Where a request was stamped at enqueue: wall ms, and the monotonic ms of `boot`. */
export interface EnqueueStamp {
  enq: number;
  mono?: number;
  boot?: string;
}

/** Now, as the gateway stamps a request it queues. */
export const enqueueStamp = (): Required<EnqueueStamp> => ({ enq: Date.now(), mono: monoMs(), boot: BOOT_ID });

/**
 * How long ago (ms) the request was enqueued: from the monotonic clock when it was stamped on this
 * boot and the two clocks agree within the wall clock's own 1 ms steps (a time namespace could
 * offset the monotonic clock of a container), else from the wall clock. Never negative.
 */
export function sinceEnqueued(s: EnqueueStamp, nowWall = Date.now(), nowMono = monoMs(), boot = BOOT_ID): number {
  const wall = nowWall - s.enq;
  if (s.mono !== undefined && s.boot === boot) {
    const mono = nowMono - s.mono;
    if (mono >= 0 && Math.abs(mono - wall) <= 2) return Math.round(mono * 1000) / 1000;
  }
  return Math.max(0, wall);
}

/** The clock that pure timing logic (the batcher, the live-first gate) is given: tests give a fake one. */
export interface Clock {
  now(): number;
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
}

export const systemClock: Clock = {
  now: () => performance.now(),
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  clearTimeout: (h) => clearTimeout(h as NodeJS.Timeout),
};
