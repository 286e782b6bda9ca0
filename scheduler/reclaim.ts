// Room for work, taken from replicas that hold none, the one least likely to be needed soon
// first. A pure decision over the scheduler's per-function view; the scheduler applies it
// (placement drains the reclaimed replica and starts the waiting function's at once).
//
// Two resources: slots cap the replicas running requests (a replica of a function with work
// holds one); memory caps every replica, idle or not (its measured footprint). An idle replica
// costs memory only, so many small functions stay warm where few would fit by slots.

export interface FunctionView {
  fn: string;
  /** Replicas the scaler decided, after the nodes' capacity capped it. */
  desired: number;
  /** Replicas the scaler wanted before that cap. */
  wanted: number;
  /** Replicas it keeps whatever its load (never reclaimed below this). */
  minReplicas: number;
  /** Waiting and running requests (live and batch), cluster-wide. */
  inFlight: number;
  /** When it last had work (ms since epoch), or null. */
  lastActiveAt: number | null;
  /** When its next request is expected (keep-alive's prediction), if known. */
  expectedAt?: number;
  /** Bytes one of its replicas holds (measured, or an estimate). */
  footprint: number;
}

export interface Room {
  /** Replicas that may run requests at once, over all nodes. */
  slots: number;
  /** Bytes all replicas may hold together, over all nodes (Infinity: unbounded). */
  memoryBytes: number;
}

export interface Reclaim {
  /** fn → replicas, for every function given. */
  desired: Record<string, number>;
  /** Replicas moved: taken from `from` (it held no work) for `to` (it has work). */
  moves: { from: string; to: string }[];
}

/** Slots a function's replicas hold: all of them while it has work, none while idle. */
export const busySlots = (f: Pick<FunctionView, 'inFlight'>, replicas: number): number => (f.inFlight > 0 ? replicas : 0);

/**
 * Gives each function with work and no replica one replica while a slot is free (otherwise its
 * work waits in its queue: every slot runs requests), then brings the memory all replicas hold
 * within the budget by taking replicas from functions that hold no work, the one whose next
 * request is expected latest first (by prediction where there is one, else the longest unused).
 * A function with work never gives up a replica, nor one below its minReplicas. What idle
 * replicas cannot free stays over the budget: placement then gives functions with work their
 * first replica regardless and their extra ones only where they fit.
 */
export function reclaim(fns: FunctionView[], room: Room, now: number): Reclaim {
  const desired = Object.fromEntries(fns.map((f) => [f.fn, f.desired]));
  const moves: Reclaim['moves'] = [];
  let slotsFree = room.slots - fns.reduce((a, f) => a + busySlots(f, f.desired), 0);
  let memoryFree = room.memoryBytes - fns.reduce((a, f) => a + f.desired * f.footprint, 0);
  const neededIn = (f: FunctionView) => (f.expectedAt !== undefined ? f.expectedAt - now : f.lastActiveAt === null ? Infinity : now - f.lastActiveAt);
  /** Takes one replica from the idle function needed latest, for `to`; false when there is none. */
  const takeOne = (to: string): boolean => {
    const v = fns.filter((f) => f.inFlight === 0 && desired[f.fn] > f.minReplicas).sort((a, b) => neededIn(b) - neededIn(a) || b.footprint - a.footprint || a.fn.localeCompare(b.fn))[0];
    if (!v) return false;
    desired[v.fn]--;
    memoryFree += v.footprint;
    moves.push({ from: v.fn, to });
    return true;
  };
  const busiestFirst = (a: FunctionView, b: FunctionView) => b.inFlight - a.inFlight || a.fn.localeCompare(b.fn);
  const starving = fns.filter((f) => f.inFlight > 0 && f.desired === 0 && f.wanted > 0).sort(busiestFirst);
  for (const s of starving) {
    if (slotsFree <= 0) break;
    desired[s.fn] = 1;
    slotsFree--;
    memoryFree -= s.footprint;
    while (memoryFree < 0 && takeOne(s.fn));
  }
  // Memory for the extra replicas the scaler gave functions with work, busiest first.
  for (const f of fns.filter((f) => f.inFlight > 0 && desired[f.fn] > 1).sort(busiestFirst)) while (memoryFree < 0 && takeOne(f.fn));
  return { desired, moves };
}
