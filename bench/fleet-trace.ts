// A synthetic invocation trace shaped like the Azure Functions 2019 trace (Shahrad et al.,
// "Serverless in the Wild"): Zipf popularity over functions, most of them invoked rarely, each
// with periodic, Poisson or bursty arrivals. Pure and seeded: the same seed, the same trace, so
// every keep-alive policy replays the same requests.

export type Arrivals = 'periodic' | 'poisson' | 'bursty';
export type Kind = 'tiny' | 'cls' | 'ocr';

export interface TraceFunction {
  name: string;
  kind: Kind;
  arrivals: Arrivals;
  /** Mean requests per second. */
  rate: number;
}

export interface Trace {
  functions: TraceFunction[];
  /** Requests measured, by time (ms from the start of the measurement). */
  requests: { at: number; fn: string }[];
  /** Requests replayed before the measurement (negative times), so it starts from a running platform rather than from every function cold at once. */
  warmup: { at: number; fn: string }[];
  /** Each function's gaps between requests in the hour before the warm-up, oldest first (what a running platform would have learned). */
  history: Record<string, number[]>;
}

export interface TraceOptions {
  functions: number;
  seconds: number;
  /** Functions that run the cls and the ocr models (the rest run no model). */
  cls: number;
  ocr: number;
  /** Mean requests per second of the most popular function; rank r gets top / r^zipf. */
  topRate: number;
  zipf: number;
  seed: number;
  /** Replayed before the measurement. @default 120 */
  warmupSeconds?: number;
  /** History generated before the warm-up, for learned keep-alive. @default 3600 */
  historySeconds?: number;
}

export const DEFAULT_TRACE: TraceOptions = { functions: 200, seconds: 300, cls: 8, ocr: 2, topRate: 2, zipf: 1.5, seed: 2019 };

/** mulberry32: a small seeded PRNG, uniform in [0, 1). */
export function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 2 ** 32;
  };
}

const exponential = (random: () => number, rate: number) => -Math.log(1 - random()) / rate;

/** Arrival times (seconds) of one function in [from, to). */
function arrivalsOf(f: TraceFunction, from: number, to: number, random: () => number): number[] {
  const out: number[] = [];
  if (f.arrivals === 'periodic') {
    const period = 1 / f.rate;
    // A fixed phase (the same timer every period), with a little jitter.
    for (let t = from + random() * period; t < to; t += period) out.push(t + (random() - 0.5) * 0.04 * period);
  } else if (f.arrivals === 'poisson') {
    for (let t = from + exponential(random, f.rate); t < to; t += exponential(random, f.rate)) out.push(t);
  } else {
    // Bursts of about five requests 200 ms apart, bursts Poisson at a fifth of the rate.
    for (let t = from + exponential(random, f.rate / 5); t < to; t += exponential(random, f.rate / 5)) {
      const size = 1 + Math.floor(exponential(random, 1 / 4));
      for (let i = 0; i < size && t + i * 0.2 < to; i++) out.push(t + i * 0.2);
    }
  }
  return out.filter((t) => t >= from && t < to).sort((a, b) => a - b);
}

export function makeTrace(o: TraceOptions = DEFAULT_TRACE): Trace {
  const random = rng(o.seed);
  const warmupSeconds = o.warmupSeconds ?? 120;
  const historySeconds = o.historySeconds ?? 3600;
  // Model functions at ranks between 5 and 60: neither the hottest nor never called.
  const ranks = Array.from({ length: Math.min(56, o.functions - 4) }, (_, i) => i + 5);
  const modelRanks = new Map<number, Kind>();
  for (const kind of ['ocr', 'cls'] as const) {
    for (let i = 0; i < (kind === 'ocr' ? o.ocr : o.cls) && ranks.length; i++) modelRanks.set(ranks.splice(Math.floor(random() * ranks.length), 1)[0], kind);
  }
  const patterns: Arrivals[] = ['periodic', 'poisson', 'bursty'];
  const functions: TraceFunction[] = Array.from({ length: o.functions }, (_, i) => {
    const rank = i + 1;
    const kind = modelRanks.get(rank) ?? 'tiny';
    const u = random();
    return { name: `fleet-${String(rank).padStart(3, '0')}-${kind}`, kind, arrivals: patterns[u < 0.35 ? 0 : u < 0.75 ? 1 : 2], rate: o.topRate / rank ** o.zipf };
  });
  const requests: Trace['requests'] = [];
  const warmup: Trace['warmup'] = [];
  const history: Record<string, number[]> = {};
  for (const f of functions) {
    const times = arrivalsOf(f, -warmupSeconds - historySeconds, o.seconds, random);
    const past = times.filter((t) => t < -warmupSeconds);
    history[f.name] = past.slice(1).map((t, i) => Math.round((t - past[i]) * 1000)).slice(-64);
    for (const t of times) if (t >= -warmupSeconds) (t >= 0 ? requests : warmup).push({ at: Math.round(t * 1000), fn: f.name });
  }
  const byTime = (a: { at: number; fn: string }, b: { at: number; fn: string }) => a.at - b.at || a.fn.localeCompare(b.fn);
  return { functions, requests: requests.sort(byTime), warmup: warmup.sort(byTime), history };
}
