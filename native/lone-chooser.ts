// Where a lone inference runs, learned from its own times. A model's wide inline session runs a
// request that has the replica to itself on every core (wideThreads intra-op threads); its narrow
// inline session runs it on EMBERS_ORT_THREADS threads (1 by default), both on the replica's own
// thread. Which is faster depends on the model and on the machine at the time: on these 2-core
// VMs the `ocr` pipeline took 45 ms with 2 threads against 68 ms with 1 on one day, and 46
// against 42 on another (raw, in-process), when the second vCPU was slow to keep up; and within
// a minute, the recogniser on two spinning threads ran 13 ms a call for some seconds and 26 for
// the next ones (a process alone on the machine, its two threads on separate vCPUs throughout).
// A fixed intra_op_num_threads (Triton, ORT) picks one.
// The chooser alternates until each side has `minSamples` runs, then takes the side with the
// lower median cost of its last `window` runs (wide unless narrow is `margin` cheaper), and
// re-checks the side not chosen with one run every so often. Costs are per input value (the
// caller divides), so inputs of different sizes compare. Medians, not means: one run slowed by
// a GC pause or a late vCPU does not swing the choice.
// The re-checks are adaptive: every `minExploreEvery` lone runs just after the choice switched
// (and after the first choice, made while the replica was starting) or after a re-check that
// contradicted it, doubling with each re-check that confirms it, up to every `exploreEvery`. A
// re-check contradicts the choice where its cost, taken as its side's median, would have made
// that side the choice (the same margin rule: ties go wide), so a near-tie does not keep the
// re-checks close. A slow spell of some seconds used to leave lone runs on the side it favoured
// until three of the other side's re-checks, one every 32 runs, had replaced its samples (~96
// lone runs after the spell: at c = 1 most of a bench section, the request 1.5× slower). Now the
// first re-check after the spell (at most exploreEvery runs later) brings the next ones 4 runs
// apart, and the choice flips back ~8 runs after it. Pure: no clock, no I/O.

export type LoneSide = 'wide' | 'narrow';

export interface LoneChooserOptions {
  /** Runs each side needs before the medians are compared. @default 3 */
  minSamples?: number;
  /** Runs per side kept for its median. @default 5 */
  window?: number;
  /** At most this many lone runs between re-checks of the side not chosen. @default 32 */
  exploreEvery?: number;
  /** At least this many, just after the choice switched or a re-check contradicted it. @default 4 */
  minExploreEvery?: number;
  /** Narrow must be this much faster (a fraction) to be chosen: ties go wide. @default 0.05 */
  margin?: number;
}

export class LoneChooser {
  private readonly times: Record<LoneSide, number[]> = { wide: [], narrow: [] };
  /** Lone runs since the side not chosen was last re-checked. */
  private sinceCheck = 0;
  /** Lone runs between re-checks now: minExploreEvery…exploreEvery. */
  private checkEvery: number;
  private readonly minSamples: number;
  private readonly window: number;
  private readonly exploreEvery: number;
  private readonly minExploreEvery: number;
  private readonly margin: number;

  constructor(o: LoneChooserOptions = {}) {
    this.minSamples = o.minSamples ?? 3;
    this.window = Math.max(o.window ?? 5, this.minSamples);
    this.exploreEvery = Math.max(1, o.exploreEvery ?? 32);
    this.minExploreEvery = Math.max(1, Math.min(o.minExploreEvery ?? 4, this.exploreEvery));
    this.margin = o.margin ?? 0.05;
    // The first choice rests on minSamples runs each, taken while the replica was starting.
    this.checkEvery = this.minExploreEvery;
  }

  /** The side the next lone run should take. */
  choose(): LoneSide {
    if (!this.measured) return this.times.wide.length <= this.times.narrow.length ? 'wide' : 'narrow';
    const best = this.best;
    if (++this.sinceCheck < this.checkEvery) return best;
    this.sinceCheck = 0;
    return other(best);
  }

  /** Records what a lone run cost on `side` (time per input value, hops included). */
  observe(side: LoneSide, cost: number): void {
    if (!Number.isFinite(cost) || cost < 0) return;
    const measured = this.measured;
    const before = this.best;
    if (measured && side !== before) {
      // A re-check: does this run say the side not chosen is the cheaper one now?
      const chosen = median(this.times[before]);
      const contradicts = side === 'narrow' ? this.narrowWins(chosen, cost) : !this.narrowWins(cost, chosen);
      this.checkEvery = contradicts ? this.minExploreEvery : Math.min(this.exploreEvery, this.checkEvery * 2);
    }
    const t = this.times[side];
    t.push(cost);
    if (t.length > this.window) t.shift();
    if (measured && this.best !== before) {
      this.checkEvery = this.minExploreEvery;
      this.sinceCheck = 0;
    }
  }

  /** The side chosen once both are measured (wide until then). */
  get best(): LoneSide {
    return this.measured && this.narrowWins(median(this.times.wide), median(this.times.narrow)) ? 'narrow' : 'wide';
  }

  /** Both sides have their minimum of runs. */
  private get measured(): boolean {
    return this.times.wide.length >= this.minSamples && this.times.narrow.length >= this.minSamples;
  }

  /** Narrow is chosen over wide only where it is `margin` cheaper: ties go wide. */
  private narrowWins(wide: number, narrow: number): boolean {
    return narrow < wide * (1 - this.margin);
  }

  /** For the replica's record: the choice and each side's median cost (NaN before a run). */
  get stats(): { choice: LoneSide; wide: number; narrow: number } {
    return { choice: this.best, wide: median(this.times.wide), narrow: median(this.times.narrow) };
  }
}

const other = (side: LoneSide): LoneSide => (side === 'wide' ? 'narrow' : 'wide');

function median(xs: readonly number[]): number {
  if (!xs.length) return Number.NaN;
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}
