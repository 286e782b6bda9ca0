// What Embers adds at concurrency 1, with the machine's drift cancelled: the raw pipeline (in
// this process) and Embers over HTTP take turns, one request each, so both meet the machine in
// the same state. On these machines the raw pipeline's p50 moved between 51 and 84 ms from one
// 4-second window to the next, so figures taken in separate windows (even alternating ones)
// said little about a gap of a few ms.
import http from 'node:http';
import { parseTiming, send, type ServerTiming, type Target } from './load.ts';
import { openRawPipeline } from './raw.ts';
import { latency, mean, type Window } from './stats.ts';

export interface PairedC1 {
  /** Raw and Embers requests measured (one each per pair). */
  pairs: number;
  rawP50Ms: number;
  embersP50Ms: number;
  /** Embers p50 − raw p50 over the interleaved requests (ms). */
  addedP50Ms: number;
  /** Median over pairs of Embers − raw latency (ms): the same gap, pair by pair. */
  pairDiffP50Ms: number;
  /** Means of Embers' Server-Timing entries (ms): queue, batch, infer, handler, total. */
  embersTiming: ServerTiming;
  /** Embers client mean − handler mean: HTTP, gateway, queue and reply (ms). */
  outsideHandlerMs: number;
  /** Embers requests that failed (left out of the figures). */
  errors: number;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

/** Warms up for window.warmupMs, then measures pairs for 3 × window.measureMs (at least 12 s). */
export async function pairedC1(image: string, embers: Target, window: Window, threads: number): Promise<PairedC1> {
  const raw = await openRawPipeline(image, threads);
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  const target = { ...embers, headers: { ...embers.headers, ...(embers.body ? { 'content-length': String(embers.body.length) } : {}) } };
  const rawMs: number[] = [];
  const embersMs: number[] = [];
  const diffs: number[] = [];
  const timings = new Map<string, number[]>();
  let errors = 0;
  let firstError: string | undefined;
  const pair = async (keep: boolean) => {
    const t0 = performance.now();
    await raw.run();
    const t1 = performance.now();
    const a = await send(agent, target, 60_000);
    const t2 = performance.now();
    if (!keep) return;
    if (a.status < 200 || a.status >= 300) {
      errors++;
      firstError ??= a.error;
      return;
    }
    rawMs.push(t1 - t0);
    embersMs.push(t2 - t1);
    diffs.push(t2 - t1 - (t1 - t0));
    if (a.timing) parseTiming(a.timing, timings);
  };
  try {
    const warmEnd = performance.now() + window.warmupMs;
    while (performance.now() < warmEnd) await pair(false);
    const end = performance.now() + Math.max(12_000, 3 * window.measureMs);
    while (performance.now() < end) await pair(true);
  } finally {
    agent.destroy();
    await raw.close();
  }
  if (!embersMs.length) throw new Error(`every Embers request at c=1 failed: ${firstError}`);
  const embersTiming = Object.fromEntries([...timings].map(([k, v]) => [k, mean(v)]));
  const [r, e] = [latency(rawMs), latency(embersMs)];
  return {
    pairs: embersMs.length,
    rawP50Ms: r.p50,
    embersP50Ms: e.p50,
    addedP50Ms: e.p50 - r.p50,
    pairDiffP50Ms: median(diffs),
    embersTiming,
    outsideHandlerMs: e.mean - (embersTiming.handler ?? Number.NaN),
    errors,
  };
}
