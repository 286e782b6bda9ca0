// Room for a function that has work and no replica, when the nodes have none free: taken from
// replicas that hold no work, the one least likely to be needed soon first. A pure decision
// over the scheduler's per-function view; the scheduler applies it (placement drains the
// reclaimed replica and starts the waiting function's at once).

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
}

export interface Reclaim {
  /** fn → replicas, for every function given. */
  desired: Record<string, number>;
  /** Replicas moved: taken from `from` (it held no work) for `to` (work waiting, no replica). */
  moves: { from: string; to: string }[];
}

/**
 * Gives each function with work and no replica one replica: from free slots first, then from a
 * function whose replicas hold no work, picking the one whose next request is expected latest
 * (by prediction where there is one, else the longest unused). A function with work never gives
 * up a replica, nor one below its minReplicas; with no such victim, the work waits in its queue
 * until room frees.
 */
export function reclaim(fns: FunctionView[], totalSlots: number, now: number): Reclaim {
  const desired = Object.fromEntries(fns.map((f) => [f.fn, f.desired]));
  const moves: Reclaim['moves'] = [];
  let free = totalSlots - fns.reduce((a, f) => a + f.desired, 0);
  const starving = fns.filter((f) => f.inFlight > 0 && f.desired === 0 && f.wanted > 0).sort((a, b) => b.inFlight - a.inFlight || a.fn.localeCompare(b.fn));
  const neededIn = (f: FunctionView) => (f.expectedAt !== undefined ? f.expectedAt - now : f.lastActiveAt === null ? Infinity : now - f.lastActiveAt);
  for (const s of starving) {
    if (free > 0) {
      desired[s.fn] = 1;
      free--;
      continue;
    }
    const victims = fns.filter((f) => f.inFlight === 0 && desired[f.fn] > f.minReplicas).sort((a, b) => neededIn(b) - neededIn(a) || a.fn.localeCompare(b.fn));
    if (victims.length === 0) break;
    const v = victims[0];
    desired[v.fn]--;
    desired[s.fn] = 1;
    moves.push({ from: v.fn, to: s.fn });
  }
  return { desired, moves };
}
