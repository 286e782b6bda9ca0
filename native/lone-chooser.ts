// Where a lone inference runs, learned from its own times. A model's inline session runs a
// request that has the replica to itself on every core (wideThreads intra-op threads); a narrow
// session runs it on EMBERS_ORT_THREADS threads (1 by default) on a worker thread (two thread
// hops). Which is faster depends on the model and on the machine at the time: on these 2-core
// VMs the `ocr` pipeline took 45 ms with 2 threads against 68 ms with 1 on one day, and 46
// against 42 on another (raw, in-process), when the second vCPU was slow to keep up. A fixed
// intra_op_num_threads (Triton, ORT) picks one.
// The chooser alternates until each side has `minSamples` runs, then takes the side with the
// lower median cost of its last `window` runs (wide unless narrow is `margin` cheaper), and every
// `exploreEvery` lone runs gives the other side one run. Costs are per input value (the caller
// divides), so inputs of different sizes compare. Medians, not means: one run slowed by a GC
// pause or a late vCPU does not swing the choice. The price is lag: the side not chosen keeps
// its last `window` samples, one per `exploreEvery` runs, so switching back to it takes about
// (window + 1) / 2 explorations (~96 lone runs by default) once it has become the cheaper one.
// Pure: no clock, no I/O.

export type LoneSide = 'wide' | 'narrow';

export interface LoneChooserOptions {
  /** Runs each side needs before the medians are compared. @default 3 */
  minSamples?: number;
  /** Runs per side kept for its median. @default 5 */
  window?: number;
  /** Every this many lone runs, one goes to the side not chosen. @default 32 */
  exploreEvery?: number;
  /** Narrow must be this much faster (a fraction) to be chosen: ties go wide. @default 0.05 */
  margin?: number;
}

export class LoneChooser {
  private readonly times: Record<LoneSide, number[]> = { wide: [], narrow: [] };
  private runs = 0;
  private readonly minSamples: number;
  private readonly window: number;
  private readonly exploreEvery: number;
  private readonly margin: number;

  constructor(o: LoneChooserOptions = {}) {
    this.minSamples = o.minSamples ?? 3;
    this.window = Math.max(o.window ?? 5, this.minSamples);
    this.exploreEvery = o.exploreEvery ?? 32;
    this.margin = o.margin ?? 0.05;
  }

  /** The side the next lone run should take. */
  choose(): LoneSide {
    this.runs++;
    const { wide, narrow } = this.times;
    if (wide.length < this.minSamples || narrow.length < this.minSamples) return wide.length <= narrow.length ? 'wide' : 'narrow';
    const best = this.best;
    if (this.runs % this.exploreEvery === 0) return best === 'wide' ? 'narrow' : 'wide';
    return best;
  }

  /** Records what a lone run cost on `side` (time per input value, hops included). */
  observe(side: LoneSide, cost: number): void {
    if (!Number.isFinite(cost) || cost < 0) return;
    const t = this.times[side];
    t.push(cost);
    if (t.length > this.window) t.shift();
  }

  /** The side chosen once both are measured (wide until then). */
  get best(): LoneSide {
    const wide = median(this.times.wide);
    const narrow = median(this.times.narrow);
    return this.times.wide.length >= this.minSamples && this.times.narrow.length >= this.minSamples && narrow < wide * (1 - this.margin) ? 'narrow' : 'wide';
  }

  /** For the replica's record: the choice and each side's median cost (NaN before a run). */
  get stats(): { choice: LoneSide; wide: number; narrow: number } {
    return { choice: this.best, wide: median(this.times.wide), narrow: median(this.times.narrow) };
  }
}

function median(xs: readonly number[]): number {
  if (!xs.length) return Number.NaN;
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}
