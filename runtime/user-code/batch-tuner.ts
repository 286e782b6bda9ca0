// How many rows a model's batches may carry, learned from its own inference times. Batching
// pays where a model's cost per row falls with batch size (GPUs, small CPU models) and costs
// where it does not: on one CPU thread PaddleOCR's recogniser costs more per row in batches of 16
// than alone, so deep batches under load would serve slower than running each request on
// arrival. The tuner keeps a moving average of ms per row
// for batch sizes in powers of two and caps batches at the size with the lowest cost. It measures
// every smaller size and the next size up, and every `exploreEvery` batches it runs one batch at
// a neighbour of the cap (the next size up and the next size down, in turn), so the cap follows
// the model and the hardware without a setting (input shapes are not told apart: their costs mix
// in the averages). A size last measured more than `staleAfter` batches ago takes its new
// measurement as its cost: costs taken while other instances were loading, or under a load that
// has since changed, do not keep it out for good (a replica's first recogniser runs cost 233 ms
// per row against 69–100 later, and size 1 was never tried again).
// Pure: no clock, no I/O.

export interface BatchTunerOptions {
  maxBatchSize: number;
  /** Batches a size needs before its cost is trusted. @default 3 */
  minSamples?: number;
  /** Weight of a new measurement in the moving average. @default 0.2 */
  alpha?: number;
  /** Every this many batches, one is a size next to the cap (above, then below), to re-measure it. @default 64 */
  exploreEvery?: number;
  /** A larger size must cost this much less per row to be preferred (lower latency wins ties). @default 0.05 */
  margin?: number;
  /** A size last measured more than this many batches ago takes its next measurement as its cost. @default exploreEvery */
  staleAfter?: number;
}

interface Bucket {
  size: number;
  msPerRow: number;
  samples: number;
  /** The batch count at its last measurement. */
  last: number;
}

export class BatchTuner {
  private readonly buckets: Bucket[] = [];
  private batches = 0;
  /** Fewest rows a call has had: smaller batches cannot happen (a call is never split). */
  private fewestRows = Number.POSITIVE_INFINITY;
  private readonly minSamples: number;
  private readonly alpha: number;
  private readonly exploreEvery: number;
  private readonly margin: number;
  private readonly staleAfter: number;

  constructor(private readonly o: BatchTunerOptions) {
    this.minSamples = o.minSamples ?? 3;
    this.alpha = o.alpha ?? 0.2;
    this.exploreEvery = o.exploreEvery ?? 64;
    this.margin = o.margin ?? 0.05;
    this.staleAfter = o.staleAfter ?? this.exploreEvery;
    for (let s = 1; s < o.maxBatchSize; s *= 2) this.buckets.push({ size: s, msPerRow: 0, samples: 0, last: 0 });
    this.buckets.push({ size: o.maxBatchSize, msPerRow: 0, samples: 0, last: 0 });
  }

  /** Records one execution of `rows` rows that took `ms`; `smallestCall`: the fewest rows one of its calls had. */
  observe(rows: number, ms: number, smallestCall = rows): void {
    if (!(rows >= 1) || !(ms >= 0)) return;
    this.batches++;
    this.fewestRows = Math.min(this.fewestRows, smallestCall);
    const b = this.buckets.find((x) => x.size >= rows) ?? this.buckets[this.buckets.length - 1];
    const perRow = ms / rows;
    // A plain mean of the first few, then a moving average: one slow first run does not linger.
    // A stale cost is replaced outright.
    b.samples++;
    const w = this.batches - b.last > this.staleAfter ? 1 : Math.max(this.alpha, 1 / b.samples);
    b.last = this.batches;
    b.msPerRow = w * perRow + (1 - w) * b.msPerRow;
  }

  /** Most rows the next batch should gather (a single call with more rows still runs alone). */
  get cap(): number {
    const trusted = this.buckets.filter((b) => b.samples >= this.minSamples);
    if (!trusted.length) return this.o.maxBatchSize;
    // The cheapest size per row; a larger one only when it is clearly cheaper.
    let best = trusted[0];
    for (const b of trusted) if (b.msPerRow < best.msPerRow * (1 - this.margin)) best = b;
    // Under steady load batches never shrink by themselves: measure the smaller sizes too, down
    // to the smallest call seen (a size below every call's rows would never be reached).
    const unmeasured = this.buckets.find((b) => b.size < best.size && b.size >= this.fewestRows && b.samples < this.minSamples);
    if (unmeasured) return unmeasured.size;
    const above = this.buckets.find((b) => b.size > best.size);
    // Nothing known above the best yet: it may be cheaper still, try it.
    if (above && above.samples < this.minSamples) return above.size;
    if (this.batches % this.exploreEvery !== 0) return best.size;
    // One batch next to the best: the size above, and the size below, in turn.
    const below = this.buckets.filter((b) => b.size < best.size && b.size >= this.fewestRows).at(-1);
    const downTurn = (this.batches / this.exploreEvery) % 2 === 1;
    return ((downTurn ? below : above) ?? above ?? below ?? best).size;
  }

  /** Per size: its cost per row (ms) and how many batches measured it, for the replica's record. */
  snapshot(): Record<string, { msPerRow: number; samples: number }> {
    return Object.fromEntries(this.buckets.filter((b) => b.samples > 0).map((b) => [String(b.size), { msPerRow: Math.round(b.msPerRow * 100) / 100, samples: b.samples }]));
  }
}
