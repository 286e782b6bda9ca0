// What Embers adds at concurrency 1, with the machine's drift cancelled: the raw pipeline (in
// this process), Embers over HTTP and a plain HTTP server running the same handler with raw's
// session settings take turns in short blocks of back-to-back requests (raw first, then Embers
// and the plain server in alternating order), so all three meet the machine in the same state.
// On these machines the raw pipeline's p50 moved between 51 and 84 ms from one 4-second window
// to the next, so figures taken in separate windows (even alternating ones) said little about a
// gap of a few ms. The first request of each block is left out: it
// follows the other sides' blocks, ~1 s in which this side's processes slept (after ~70 ms idle
// each process hop costs ~0.3 ms more on these VMs: `echo` at c = 1 measured p50 1.2 ms back to
// back, 3.9–4.5 ms with 60 ms between requests).
// The plain server is the floor for anything answering over HTTP: raw has no HTTP at all, and
// every request, even back to back, follows ~50 ms of inference in which the client and the
// server's event loop slept (a trace measured 0.47 ms from the client's send to the plain
// server's route and 0.74 ms from its answer to the client's receipt). Compare the sides'
// outside-handler times rather than their p50s: the handlers differ in more than the queue (the
// plain server runs with node's default heap, the replica with a 128 MB one: GC per request
// differs by ms).
import http from 'node:http';
import { parseTiming, sendBlock, type ServerTiming, type Target } from './load.ts';
import { openRawPipeline } from './raw.ts';
import type { ThreadSetting } from './ort.ts';
import { latency, mean, percentile, type Window } from './stats.ts';

/** Requests per block, the first of which is not counted. */
export const BLOCK = 8;

/** One HTTP side of the turns. */
export interface PairedSide {
  /** Blocks with at least one answer (BLOCK - 1 requests counted per block). */
  blocks: number;
  p50Ms: number;
  /** This side's p50 − raw p50 over the interleaved requests (ms). */
  addedP50Ms: number;
  /** Median over blocks of this side's block p50 − the raw block p50 before it (ms). */
  blockDiffP50Ms: number;
  /** The quartiles of those block differences (ms): how far the gap moved from block to block. */
  blockDiffQuartilesMs: [number, number];
  /** Means of the Server-Timing entries (ms): Embers' queue, input, batch, infer, output, handler, total; the plain server's handler. */
  timing: ServerTiming;
  /** Client mean − handler mean: HTTP (and for Embers the gateway, queue and reply), ms. */
  outsideHandlerMs: number;
  /** Requests that failed (left out of the figures). */
  errors: number;
  firstError?: string;
}

export interface PairedC1 {
  /** Blocks each side ran (BLOCK - 1 requests counted per block). */
  blocks: number;
  rawP50Ms: number;
  embersP50Ms: number;
  /** Embers p50 − raw p50 over the interleaved requests (ms). */
  addedP50Ms: number;
  /** Median over block pairs of Embers block p50 − raw block p50 (ms): the same gap, block by block. */
  blockDiffP50Ms: number;
  /** The quartiles of those block differences (ms). */
  blockDiffQuartilesMs: [number, number];
  /** Means of Embers' Server-Timing entries (ms): queue, input, batch, infer, output, handler, total. */
  embersTiming: ServerTiming;
  /** Embers client mean − handler mean: HTTP, gateway, queue and reply (ms). */
  outsideHandlerMs: number;
  /** Embers requests that failed (left out of the figures). */
  errors: number;
  /** The plain HTTP server (the naive server with raw's session settings), when it took turns too. */
  plain?: PairedSide;
}

/** Upper median; NaN for no samples. */
const median = (xs: number[]) => (xs.length ? [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] : Number.NaN);

/** Lower and upper quartile (nearest rank); NaN for no samples. */
const quartiles = (xs: number[]): [number, number] => {
  const s = Float64Array.from(xs).sort();
  return [percentile(s, 25), percentile(s, 75)];
};

/** Collects one HTTP side's blocks. */
class HttpSide {
  readonly ms: number[] = [];
  /** The raw requests of the rounds this side counted. */
  readonly rawMs: number[] = [];
  blocks = 0;
  readonly diffs: number[] = [];
  readonly timings = new Map<string, number[]>();
  errors = 0;
  firstError?: string;
  private readonly agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  private readonly target: Target;

  constructor(target: Target) {
    this.target = { ...target, headers: { ...target.headers, ...(target.body ? { 'content-length': String(target.body.length) } : {}) } };
  }

  /** A block of BLOCK requests; when kept (and answered), its figures count against the raw block `rawBlock`. */
  async block(keep: boolean, rawBlock: number[]): Promise<void> {
    const e: number[] = [];
    (await sendBlock(this.agent, this.target, BLOCK)).forEach((a, i) => {
      if (a.status < 200 || a.status >= 300) {
        if (keep) this.errors++;
        this.firstError ??= a.error;
      } else if (i > 0) {
        e.push(a.ms);
        if (keep && a.timing) parseTiming(a.timing, this.timings);
      }
    });
    if (!keep || !e.length) return;
    this.blocks++;
    this.ms.push(...e);
    this.rawMs.push(...rawBlock);
    this.diffs.push(median(e) - median(rawBlock));
  }

  /** The raw p50 over the rounds this side counted. */
  get rawP50Ms(): number {
    return latency(this.rawMs).p50;
  }

  /** Against the raw requests of the rounds it counted (NaN figures when nothing was answered). */
  result(): PairedSide {
    const timing = Object.fromEntries([...this.timings].map(([k, v]) => [k, mean(v)]));
    const l = latency(this.ms);
    const rawP50Ms = this.rawP50Ms;
    return {
      blocks: this.blocks,
      p50Ms: l.p50,
      addedP50Ms: l.p50 - rawP50Ms,
      blockDiffP50Ms: median(this.diffs),
      blockDiffQuartilesMs: quartiles(this.diffs),
      timing,
      outsideHandlerMs: l.mean - (timing.handler ?? Number.NaN),
      errors: this.errors,
      ...(this.firstError ? { firstError: this.firstError } : {}),
    };
  }

  close(): void {
    this.agent.destroy();
  }
}

/** Warms up for window.warmupMs, then measures rounds of blocks for 4 × window.measureMs (at least 20 s). */
export async function pairedC1(image: string, embers: Target, window: Window, setting: ThreadSetting, plain?: Target): Promise<PairedC1> {
  const raw = await openRawPipeline(image, setting);
  const sides = { embers: new HttpSide(embers), plain: plain ? new HttpSide(plain) : undefined };
  let rounds = 0;
  const round = async (keep: boolean) => {
    const r: number[] = [];
    for (let i = 0; i < BLOCK; i++) {
      const t0 = performance.now();
      await raw.run();
      if (i > 0) r.push(performance.now() - t0);
    }
    // Neither HTTP side always comes straight after raw's block.
    const order = rounds++ % 2 === 0 ? [sides.embers, sides.plain] : [sides.plain, sides.embers];
    for (const side of order) await side?.block(keep, r);
  };
  try {
    const warmEnd = performance.now() + window.warmupMs;
    while (performance.now() < warmEnd) await round(false);
    const end = performance.now() + Math.max(20_000, 4 * window.measureMs);
    while (performance.now() < end) await round(true);
  } finally {
    sides.embers.close();
    sides.plain?.close();
    await raw.close();
  }
  if (!sides.embers.blocks) throw new Error(`every Embers request at c=1 failed: ${sides.embers.firstError}`);
  const e = sides.embers.result();
  return {
    blocks: e.blocks,
    rawP50Ms: sides.embers.rawP50Ms,
    embersP50Ms: e.p50Ms,
    addedP50Ms: e.addedP50Ms,
    blockDiffP50Ms: e.blockDiffP50Ms,
    blockDiffQuartilesMs: e.blockDiffQuartilesMs,
    embersTiming: e.timing,
    outsideHandlerMs: e.outsideHandlerMs,
    errors: e.errors,
    // A plain server that answered nothing still reports its errors (blocks 0).
    ...(sides.plain ? { plain: sides.plain.result() } : {}),
  };
}
