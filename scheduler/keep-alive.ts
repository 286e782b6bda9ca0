// How long a function's replica stays warm after its last request, learned from the function's
// own idle times: the hybrid histogram policy of Shahrad et al., "Serverless in the Wild"
// (USENIX ATC '20). A pure decision over recorded idle times; the scaler applies it.
//
// - Enough idle times, most within the bound: keep warm from the 5th percentile of idle time
//   (less a 10 % margin: the pre-warm window, at zero until then) to the 99th (plus 10 %).
//   Periodic functions get a short window around their period; bursty ones stay warm over
//   their gaps. A window is at least MIN_KEEP_ALIVE_MS long.
// - Most idle times past the bound (a rare function): no keep-alive after a request; a replica
//   is pre-warmed shortly before the next arrival the recent idle times predict.
// - Too few idle times: the window the user gave, or with 'auto' a short one
//   (UNLEARNED_KEEP_ALIVE_MS): holding memory longer needs evidence. When the few seen all pass
//   the bound, the rare case, predicted from them.
// - Enough, but too spread to tell (the histogram's coefficient of variation is low): the fixed
//   window, the bound itself.

/** Idle times a function keeps (a ring: the newest replace the oldest). */
export const IDLE_TIMES_KEPT = 64;
/** Fewer than this and the histogram is not trusted. */
export const MIN_IDLE_TIMES = 5;
/** Keep-alive of an 'auto' function that has shown too few idle times to learn from (or the bound, if shorter). */
export const UNLEARNED_KEEP_ALIVE_MS = 60_000;
const MARGIN = 0.1;
/**
 * A pre-warm window shorter than this keeps the replica instead: draining it and starting another
 * costs a cold start's CPU, worth paying only for a gap this long.
 */
export const MIN_PREWARM_MS = 30_000;
/** The shortest learned keep-alive (or the bound, if shorter), for the same reason. */
export const MIN_KEEP_ALIVE_MS = 30_000;
/** The histogram's bins span the bound in this many parts. */
const BINS = 60;
/** Below this coefficient of variation of the bin counts, idle times show no pattern. */
const MIN_CV = 2;

export interface KeepAlive {
  /** After the last request, the replica may go to zero until this many ms have passed… */
  prewarmMs: number;
  /** …and is then kept (or pre-warmed) for this many ms more. */
  keepAliveMs: number;
  why: 'fixed' | 'unlearned' | 'histogram' | 'rare';
}

/**
 * The windows for idle times `idleMs` (oldest first) under the upper bound `maxMs`; `unlearnedMs`:
 * the window while there are too few idle times (the user's idleTimeoutS, if a number).
 */
export function keepAliveWindow(idleMs: readonly number[], maxMs: number, unlearnedMs = Math.min(maxMs, UNLEARNED_KEEP_ALIVE_MS)): KeepAlive {
  const fixed: KeepAlive = { prewarmMs: 0, keepAliveMs: maxMs, why: 'fixed' };
  const within = idleMs.filter((t) => t <= maxMs);
  // Rare: most idle times past the bound (all of them while there are few).
  const rare = idleMs.length >= MIN_IDLE_TIMES ? within.length * 2 < idleMs.length : idleMs.length >= 2 && within.length === 0;
  if (rare) {
    // Predict the next idle time from the recent ones (their median: robust to one odd gap) and
    // be warm just before it, for a short while.
    const next = percentile(idleMs.slice(-MIN_IDLE_TIMES * 2), 0.5);
    // Gaps this short are cheaper kept warm than drained and started again.
    if (next * (1 - MARGIN) < MIN_PREWARM_MS) return fixed;
    return { prewarmMs: next * (1 - MARGIN), keepAliveMs: Math.min(maxMs, Math.max(MIN_PREWARM_MS, next * 2 * MARGIN)), why: 'rare' };
  }
  if (idleMs.length < MIN_IDLE_TIMES) return { prewarmMs: 0, keepAliveMs: unlearnedMs, why: 'unlearned' };
  if (coefficientOfVariation(histogram(within, maxMs)) < MIN_CV) return fixed;
  let head = percentile(within, 0.05) * (1 - MARGIN);
  if (head < MIN_PREWARM_MS) head = 0;
  const tail = Math.min(maxMs, Math.max(head + MIN_KEEP_ALIVE_MS, percentile(within, 0.99) * (1 + MARGIN)));
  return { prewarmMs: head, keepAliveMs: Math.max(0, tail - head), why: 'histogram' };
}

/**
 * Whether a replica is wanted `sinceLastMs` after the function's last request; a pre-warm
 * starts `leadMs` early, so that the replica is ready (its cold start done) when the window opens.
 */
export function warmAt(k: KeepAlive, sinceLastMs: number, leadMs = 0): boolean {
  const { from, to } = warmWindow(k, leadMs);
  return sinceLastMs >= from && sinceLastMs < to;
}

/** When a replica is wanted, in ms after the last request: [from, to). */
function warmWindow(k: KeepAlive, leadMs: number): { from: number; to: number } {
  return { from: k.prewarmMs > 0 ? Math.max(0, k.prewarmMs - leadMs) : 0, to: k.prewarmMs + k.keepAliveMs };
}

/** When the function's next request is expected, ms after its last one (the median idle time), if it can be told. */
export function expectedIdleMs(idleMs: readonly number[]): number | undefined {
  return idleMs.length >= MIN_IDLE_TIMES ? percentile(idleMs, 0.5) : undefined;
}

/** `ring` with `idleMs` added, at most IDLE_TIMES_KEPT long. */
export function recordIdle(ring: readonly number[], idleMs: number): number[] {
  const next = [...ring, idleMs];
  return next.length > IDLE_TIMES_KEPT ? next.slice(next.length - IDLE_TIMES_KEPT) : next;
}

function percentile(values: readonly number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(p * sorted.length) - 1))];
}

function histogram(values: readonly number[], maxMs: number): number[] {
  const bins = new Array<number>(BINS).fill(0);
  for (const v of values) bins[Math.min(BINS - 1, Math.floor((v / Math.max(1, maxMs)) * BINS))]++;
  return bins;
}

function coefficientOfVariation(counts: readonly number[]): number {
  const mean = counts.reduce((a, b) => a + b, 0) / counts.length;
  if (mean === 0) return 0;
  const variance = counts.reduce((a, c) => a + (c - mean) ** 2, 0) / counts.length;
  return Math.sqrt(variance) / mean;
}

export interface Replay {
  arrivals: number;
  /** Arrivals that found no warm replica. */
  cold: number;
  /** Time a replica was warm with no request (ms): memory kept for nothing. */
  idleMs: number;
}

/**
 * Replays arrival times (ms, ascending) of one function through a keep-alive policy: `policy`
 * gives the windows from the idle times seen so far. Requests take no time; the first is cold.
 * For tests and the fleet benchmark's comparison of policies.
 */
export function replayKeepAlive(arrivalsMs: readonly number[], policy: (idleMs: readonly number[]) => KeepAlive, leadMs = 0): Replay {
  let cold = 0;
  let idleMs = 0;
  let seen: number[] = [];
  let last: number | undefined;
  for (const t of arrivalsMs) {
    if (last === undefined) cold++;
    else {
      const k = policy(seen);
      const since = t - last;
      const { from, to } = warmWindow(k, leadMs);
      if (since < from || since >= to) cold++;
      idleMs += Math.max(0, Math.min(since, to) - from);
      seen = recordIdle(seen, since);
    }
    last = t;
  }
  return { arrivals: arrivalsMs.length, cold, idleMs };
}
