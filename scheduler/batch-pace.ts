// How fast the batch feeder feeds a batch: how soon it looks again for room in the batch's
// window, and how many lines a chunk job holds, from the rate the batch's lines finish at.
// Pure: the feeder (batch-feeder.ts) gives the clock's readings.

export const POLL_MS = 100;
const MIN_LOOK_MS = 10;
/** Lines queued with one addBulk (a chunk is never split across two). */
export const FEED_LINES = 64;
/** Most lines in one chunk job. */
const MAX_CHUNK = 64;
/** A chunk holds about this many ms of the batch's lines at the rate they finished (chunkLines). */
const CHUNK_MS = 10;
/** How far back Pace looks. */
const PACE_SPAN_MS = 1000;
/** The least span of samples a chunk size is decided on. */
export const DECIDE_SPAN_MS = 250;

/**
 * When the feeder, short of `short` lines of room in the batch's window, looks again: when
 * about half of them should have finished at the rate lines finished at lately (`perMs` lines
 * a ms, from Pace; undefined until it knows), within [10, 100] ms: a fast function's window must
 * not drain between two looks, and a slow one is still looked at every 100 ms (one HGETALL a look).
 */
export function nextLookMs(short: number, perMs: number | undefined): number {
  if (perMs === undefined) return MIN_LOOK_MS;
  if (perMs <= 0) return POLL_MS;
  return Math.min(POLL_MS, Math.max(MIN_LOOK_MS, short / perMs / 2));
}

/**
 * Lines a chunk job holds, from the rate the batch's lines finished at (`perMs` a ms, over all
 * replicas): about CHUNK_MS of them, so a function of a few ms a line or more keeps one line a
 * job (and its lines spread over replicas), and a sub-ms one (`echo`) pays BullMQ's job scripts
 * (addStandardJob and moveToFinished, which cost more in Redis than the line itself) once for
 * tens of lines. At most a quarter of the window, so several chunks are out at once.
 */
export function chunkLines(perMs: number, maxOutstanding: number): number {
  return Math.max(1, Math.min(MAX_CHUNK, Math.floor(maxOutstanding / 4), Math.floor(perMs * CHUNK_MS)));
}

/**
 * The rate a batch's lines finish at, over its last second or so: lines finish in bursts (a
 * chunk at a time), so a look's own interval (10 ms) says little.
 */
export class Pace {
  private readonly seen: { at: number; done: number }[] = [];

  note(at: number, done: number): void {
    this.seen.push({ at, done });
    // Keep the newest sample at least a second old, and nothing older.
    while (this.seen.length > 2 && at - this.seen[1]!.at >= PACE_SPAN_MS) this.seen.shift();
  }

  /** Lines a ms since the oldest sample kept, once that spans at least `minSpanMs`. */
  perMs(minSpanMs = 100): number | undefined {
    const first = this.seen[0];
    const last = this.seen.at(-1);
    if (!first || !last || last.at - first.at < minSpanMs) return undefined;
    return (last.done - first.done) / (last.at - first.at);
  }
}
