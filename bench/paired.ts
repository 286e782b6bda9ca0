// What Embers adds at concurrency 1, with the machine's drift cancelled: the raw pipeline (in
// this process) and Embers over HTTP take turns in short blocks of back-to-back requests, so
// both meet the machine in the same state. On these machines the raw pipeline's p50 moved
// between 51 and 84 ms from one 4-second window to the next, so figures taken in separate
// windows (even alternating ones) said little about a gap of a few ms. The first request of
// each block is left out: it follows the other side's block, ~0.5 s in which this side's
// processes slept (after ~70 ms idle each process hop costs ~0.3 ms more on these VMs: `echo`
// at c = 1 measured p50 1.2 ms back to back, 3.9–4.5 ms with 60 ms between requests).
import http from 'node:http';
import { parseTiming, send, type ServerTiming, type Target } from './load.ts';
import { openRawPipeline } from './raw.ts';
import { latency, mean, type Window } from './stats.ts';

/** Requests per block, the first of which is not counted. */
export const BLOCK = 8;

export interface PairedC1 {
  /** Blocks each side ran (BLOCK - 1 requests counted per block). */
  blocks: number;
  rawP50Ms: number;
  embersP50Ms: number;
  /** Embers p50 − raw p50 over the interleaved requests (ms). */
  addedP50Ms: number;
  /** Median over block pairs of Embers block p50 − raw block p50 (ms): the same gap, block by block. */
  blockDiffP50Ms: number;
  /** Means of Embers' Server-Timing entries (ms): queue, batch, infer, handler, total. */
  embersTiming: ServerTiming;
  /** Embers client mean − handler mean: HTTP, gateway, queue and reply (ms). */
  outsideHandlerMs: number;
  /** Embers requests that failed (left out of the figures). */
  errors: number;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

/** Warms up for window.warmupMs, then measures blocks for 3 × window.measureMs (at least 12 s). */
export async function pairedC1(image: string, embers: Target, window: Window, threads: number): Promise<PairedC1> {
  const raw = await openRawPipeline(image, threads);
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  const target = { ...embers, headers: { ...embers.headers, ...(embers.body ? { 'content-length': String(embers.body.length) } : {}) } };
  const rawMs: number[] = [];
  const embersMs: number[] = [];
  const diffs: number[] = [];
  const timings = new Map<string, number[]>();
  let blocks = 0;
  let errors = 0;
  let firstError: string | undefined;
  const block = async (keep: boolean) => {
    const r: number[] = [];
    const e: number[] = [];
    for (let i = 0; i < BLOCK; i++) {
      const t0 = performance.now();
      await raw.run();
      if (i > 0) r.push(performance.now() - t0);
    }
    for (let i = 0; i < BLOCK; i++) {
      const t0 = performance.now();
      const a = await send(agent, target, 60_000);
      const ms = performance.now() - t0;
      if (a.status < 200 || a.status >= 300) {
        if (keep) errors++;
        firstError ??= a.error;
      } else if (i > 0) {
        e.push(ms);
        if (keep && a.timing) parseTiming(a.timing, timings);
      }
    }
    if (!keep || !e.length) return;
    blocks++;
    rawMs.push(...r);
    embersMs.push(...e);
    diffs.push(median(e) - median(r));
  };
  try {
    const warmEnd = performance.now() + window.warmupMs;
    while (performance.now() < warmEnd) await block(false);
    const end = performance.now() + Math.max(12_000, 3 * window.measureMs);
    while (performance.now() < end) await block(true);
  } finally {
    agent.destroy();
    await raw.close();
  }
  if (!embersMs.length) throw new Error(`every Embers request at c=1 failed: ${firstError}`);
  const embersTiming = Object.fromEntries([...timings].map(([k, v]) => [k, mean(v)]));
  const [r, e] = [latency(rawMs), latency(embersMs)];
  return {
    blocks,
    rawP50Ms: r.p50,
    embersP50Ms: e.p50,
    addedP50Ms: e.p50 - r.p50,
    blockDiffP50Ms: median(diffs),
    embersTiming,
    outsideHandlerMs: e.mean - (embersTiming.handler ?? Number.NaN),
    errors,
  };
}
