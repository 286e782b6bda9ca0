// Per-minute roll-ups of each function, kept in Redis for a day: what the console plots, with
// nothing else installed. Requests are added in the Lua call that writes their usage record
// (core/lua/usage.lua), so each is counted once; the leading scheduler adds its samples of
// queue depth and replicas (sampleGauges). Reading them and the decisions on them are pure
// (seriesPoints, summarize) apart from readSeries.
import type { Redis } from 'ioredis';
import { keys } from './keys.ts';
import { utcDigits } from './months.ts';
import { lua } from './lua.ts';
import { evalScript } from './redis.ts';

/** How long a minute's roll-up is kept: a day, and an hour's slack for a reader looking back 24 h. */
export const SERIES_TTL_S = 25 * 3600;
/** The most minutes one read covers. */
export const MAX_MINUTES = 24 * 60;

/**
 * Upper bounds (ms) of the latency buckets, a request's queue wait plus its handler time; one more
 * bucket holds what is slower than the last.
 */
export const LATENCY_BOUNDS_MS = [1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10_000, 30_000, 60_000];

/** The bucket index of a latency. */
export function latencyBucket(ms: number): number {
  if (!(ms > 0)) return 0;
  for (let i = 0; i < LATENCY_BOUNDS_MS.length; i++) if (ms <= LATENCY_BOUNDS_MS[i]) return i;
  return LATENCY_BOUNDS_MS.length;
}

/** YYYYMMDDHHmm of a UTC time. */
export const minuteOf = (ms: number) => utcDigits(ms, 16);

/** The minute key a usage record (by its `at`) is added to. */
export const minuteKey = (fn: string, at: string): string => keys.series(fn, utcDigits(at, 16));

export interface SeriesPoint {
  /** Start of the minute (ISO). */
  at: string;
  requests: number;
  /** Answered 4xx or 5xx. */
  errors: number;
  serverErrors: number;
  coldStarts: number;
  computeMs: number;
  /** Mean queue wait of the minute's requests. */
  queueMs: number;
  /** Latency quantiles (queue wait plus handler time), from the minute's buckets; null without requests. */
  p50Ms: number | null;
  p99Ms: number | null;
  /** Requests per latency bucket (LATENCY_BOUNDS_MS, then slower). */
  latency: number[];
  /** The most requests waiting or running that the scheduler saw in the minute; null when it did not look (the function was idle). */
  depth: number | null;
  ready: number | null;
}

/** Reads the last `minutes` minutes (ending with the current one) of each function, oldest first. */
export async function readSeries(redis: Redis, fns: string[], minutes: number, now = Date.now()): Promise<Map<string, SeriesPoint[]>> {
  const n = Math.max(1, Math.min(MAX_MINUTES, Math.floor(minutes)));
  const first = Math.floor(now / 60_000) * 60_000 - (n - 1) * 60_000;
  const starts = Array.from({ length: n }, (_, i) => first + i * 60_000);
  const pipe = redis.pipeline();
  for (const fn of fns) for (const t of starts) pipe.hgetall(keys.series(fn, minuteOf(t)));
  const res = (await pipe.exec()) ?? [];
  const out = new Map<string, SeriesPoint[]>();
  fns.forEach((fn, f) =>
    out.set(
      fn,
      starts.map((t, i) => seriesPoint(t, (res[f * n + i]?.[1] ?? {}) as Record<string, string>)),
    ),
  );
  return out;
}

/** One minute's point from its hash. */
export function seriesPoint(start: number, h: Record<string, string>): SeriesPoint {
  const num = (k: string) => Number(h[k] ?? 0) || 0;
  const requests = num('requests');
  const buckets = LATENCY_BOUNDS_MS.map((_, i) => num(`lat_${i}`)).concat(num(`lat_${LATENCY_BOUNDS_MS.length}`));
  return {
    at: new Date(start).toISOString(),
    requests,
    errors: num('errors'),
    serverErrors: num('server_errors'),
    coldStarts: num('cold_starts'),
    computeMs: round(num('compute_ms')),
    queueMs: requests ? round(num('queue_ms') / requests) : 0,
    p50Ms: quantile(buckets, 0.5),
    p99Ms: quantile(buckets, 0.99),
    latency: buckets,
    depth: h.depth === undefined ? null : num('depth'),
    ready: h.ready === undefined ? null : num('ready'),
  };
}

/**
 * The q-quantile of bucket counts (LATENCY_BOUNDS_MS, then overflow), interpolated within its
 * bucket as Prometheus's histogram_quantile does; the overflow bucket answers its lower bound.
 */
export function quantile(buckets: number[], q: number): number | null {
  const total = buckets.reduce((a, b) => a + b, 0);
  if (total === 0) return null;
  const rank = q * total;
  let seen = 0;
  for (let i = 0; i < buckets.length; i++) {
    if (buckets[i] === 0 || seen + buckets[i] < rank) {
      seen += buckets[i];
      continue;
    }
    if (i === LATENCY_BOUNDS_MS.length) return LATENCY_BOUNDS_MS[i - 1];
    const lo = i === 0 ? 0 : LATENCY_BOUNDS_MS[i - 1];
    return round(lo + (LATENCY_BOUNDS_MS[i] - lo) * ((rank - seen) / buckets[i]));
  }
  return LATENCY_BOUNDS_MS[LATENCY_BOUNDS_MS.length - 1];
}

export interface SeriesSummary {
  requests: number;
  /** Requests a second over the window. */
  perSecond: number;
  errors: number;
  coldStarts: number;
  /** Over the window's requests, from the sum of its minutes' buckets. */
  p50Ms: number | null;
  p99Ms: number | null;
}

/** Totals over points. */
export function summarize(points: SeriesPoint[]): SeriesSummary {
  const requests = points.reduce((a, p) => a + p.requests, 0);
  const buckets = LATENCY_BOUNDS_MS.map(() => 0).concat(0);
  for (const p of points) p.latency.forEach((n, i) => (buckets[i] += n));
  return {
    requests,
    perSecond: points.length ? round(requests / (points.length * 60)) : 0,
    errors: points.reduce((a, p) => a + p.errors, 0),
    coldStarts: points.reduce((a, p) => a + p.coldStarts, 0),
    p50Ms: quantile(buckets, 0.5),
    p99Ms: quantile(buckets, 0.99),
  };
}

const round = (x: number) => Math.round(x * 100) / 100;

const GAUGES = lua('series-gauges', { SERIES_TTL_S });

/** The scheduler's samples of the current minute: each field keeps the highest value seen in it. */
export async function sampleGauges(redis: Redis, samples: { fn: string; depth: number; ready: number }[], now = Date.now()): Promise<void> {
  if (!samples.length) return;
  const minute = minuteOf(now);
  await evalScript(redis, GAUGES, samples.length, ...samples.map((s) => keys.series(s.fn, minute)), ...samples.flatMap((s) => [String(s.depth), String(s.ready)]));
}
