// The user-code process's main-thread GC pauses, counted from the first time they are asked for
// (reported in its stats: a handler that allocates much shows up as time in GC).
import { PerformanceObserver } from 'node:perf_hooks';

const pauses = { count: 0, ms: 0 };
let observer: PerformanceObserver | undefined;

/** Starts counting, if not yet. */
export function observeGcPauses(): void {
  if (observer) return;
  observer = new PerformanceObserver((list) => {
    for (const e of list.getEntries()) {
      pauses.count++;
      pauses.ms += e.duration;
    }
  });
  observer.observe({ entryTypes: ['gc'] });
}

/** GC pauses counted so far, and their time (ms, rounded). */
export const gcPauses = () => ({ count: pauses.count, ms: Math.round(pauses.ms) });
