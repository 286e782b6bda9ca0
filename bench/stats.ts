// Small numeric helpers shared by the measurements.

export interface Latency {
  mean: number;
  p50: number;
  p90: number;
  p99: number;
  max: number;
}

/** Nearest-rank percentile of ascending-sorted samples. */
export function percentile(sorted: ArrayLike<number>, p: number): number {
  if (sorted.length === 0) return Number.NaN;
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[rank];
}

export function latency(samplesMs: readonly number[]): Latency {
  const s = Float64Array.from(samplesMs).sort();
  const mean = s.length ? s.reduce((a, b) => a + b, 0) / s.length : Number.NaN;
  return { mean, p50: percentile(s, 50), p90: percentile(s, 90), p99: percentile(s, 99), max: s.length ? s[s.length - 1] : Number.NaN };
}

export const mean = (xs: readonly number[]): number => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : Number.NaN);

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** Measurement window from the environment: BENCH_SECONDS measured (default 5), BENCH_WARMUP_SECONDS before it (default 2). */
export interface Window {
  warmupMs: number;
  measureMs: number;
}

export function windowFromEnv(env: NodeJS.ProcessEnv = process.env): Window {
  const num = (name: string, dflt: number): number => {
    const v = env[name];
    if (v === undefined || v === '') return dflt;
    const n = Number(v);
    if (!(n > 0 && n <= 600)) throw new Error(`${name} must be a number of seconds in (0, 600], got "${v}"`);
    return n;
  };
  return { warmupMs: num('BENCH_WARMUP_SECONDS', 2) * 1000, measureMs: num('BENCH_SECONDS', 5) * 1000 };
}

/**
 * Runs `step` back to back: `warmupMs` unmeasured, then `measureMs` measured; at most
 * `maxSteps` measured steps. Returns each measured step's duration in ms.
 */
export async function timedLoop(step: () => Promise<unknown>, w: Window, maxSteps = 100_000): Promise<{ durations: number[]; seconds: number }> {
  const warmEnd = performance.now() + w.warmupMs;
  for (let i = 0; i < maxSteps && performance.now() < warmEnd; i++) await step();
  const durations: number[] = [];
  const start = performance.now();
  const end = start + w.measureMs;
  while (durations.length < maxSteps && performance.now() < end) {
    const t = performance.now();
    await step();
    durations.push(performance.now() - t);
  }
  return { durations, seconds: (performance.now() - start) / 1000 };
}
