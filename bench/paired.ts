// What Embers adds at concurrency 1, with the machine's drift cancelled: the raw pipeline
// (in-process) and Embers over HTTP measured in alternating short rounds, and the difference
// of their p50s taken round by round. On these machines throughput drifts by up to 2× within
// minutes, so a raw figure taken minutes before the Embers point says little about the gap.
import { closedLoop, type Target } from './load.ts';
import { rawPipeline } from './raw.ts';
import type { Window } from './stats.ts';

export interface PairedRound {
  rawP50Ms: number;
  embersP50Ms: number;
  /** Client-side mean latency of the Embers round. */
  embersMeanMs: number;
  /** Server-Timing means of the Embers round: handler wall time and gateway total. */
  embersHandlerMs: number;
  embersTotalMs: number;
}

export interface PairedC1 {
  rounds: PairedRound[];
  /** Median over rounds of Embers p50 − raw p50 (ms). */
  addedP50Ms: number;
  /** Median over rounds of Embers client mean − handler mean: queue, HTTP, gateway and reply (ms). */
  outsideHandlerMs: number;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

export async function pairedC1(image: string, embers: Target, window: Window, threads: number, rounds = 3): Promise<PairedC1> {
  const short: Window = { warmupMs: 1000, measureMs: Math.max(3000, window.measureMs / 2) };
  const out: PairedRound[] = [];
  for (let i = 0; i < rounds; i++) {
    const raw = await rawPipeline(image, short, threads);
    const e = await closedLoop(embers, { concurrency: 1, window: short });
    out.push({ rawP50Ms: raw.latencyMs.p50, embersP50Ms: e.latencyMs.p50, embersMeanMs: e.latencyMs.mean, embersHandlerMs: e.serverTiming?.handler ?? Number.NaN, embersTotalMs: e.serverTiming?.total ?? Number.NaN });
  }
  return {
    rounds: out,
    addedP50Ms: median(out.map((r) => r.embersP50Ms - r.rawP50Ms)),
    outsideHandlerMs: median(out.map((r) => r.embersMeanMs - r.embersHandlerMs)),
  };
}
