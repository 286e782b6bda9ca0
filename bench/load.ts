// Closed-loop HTTP load: N workers on keep-alive connections, each sending its next request
// when the previous one answers. node:http with a keep-alive Agent: the cheapest client on
// CPU at hand, which matters when the load generator shares two cores with the servers.
import http from 'node:http';
import { latency, mean, type Latency, type Window } from './stats.ts';

export interface Target {
  port: number;
  method: 'GET' | 'POST';
  path: string;
  headers?: Record<string, string>;
  body?: Buffer;
}

export interface LoadOptions {
  concurrency: number;
  window: Window;
  /** Warm-up goes on until every worker has had an answer, at most this long. @default 30 s */
  maxWarmupMs?: number;
  /** Longest wait for requests still in flight when the window closes. @default 60 s */
  drainMs?: number;
  /** Most requests sent in all, warm-up included. @default 500,000 */
  maxRequests?: number;
  /** One request's limit. @default 60 s */
  timeoutMs?: number;
  /** Pause after each answer before the worker's next request (sporadic traffic). @default 0 */
  thinkMs?: number;
}

/** Means of the Server-Timing entries (ms) over the measured answers that carried them. */
export type ServerTiming = Record<string, number>;

export interface LoadResult {
  concurrency: number;
  /** Answers with a 2xx status inside the measured window. */
  requests: number;
  /** Non-2xx answers and failed requests inside the window. */
  errors: number;
  seconds: number;
  reqPerSec: number;
  latencyMs: Latency;
  serverTiming?: ServerTiming;
  statuses: Record<string, number>;
  warmupSeconds: number;
  /** In flight when the drain limit passed (their sockets were destroyed). */
  abandoned: number;
  firstError?: string;
  /** The SLOWEST_KEPT slowest measured answers, slowest first, each with its Server-Timing (ms): what slowed a high percentile. */
  slowest?: SlowAnswer[];
}

export interface SlowAnswer {
  ms: number;
  /** Seconds after the measured window opened. */
  atS: number;
  timing: ServerTiming;
}

/** Slowest answers a run keeps (the p99 of a few hundred answers is one of its slowest few). */
export const SLOWEST_KEPT = 5;

export interface Answer {
  status: number;
  timing?: string;
  error?: string;
}

/** One request on `agent`; resolves (never rejects) with its status and Server-Timing header. */
export function send(agent: http.Agent, t: Target, timeoutMs: number): Promise<Answer> {
  return new Promise((resolve) => {
    const req = http.request({ host: '127.0.0.1', port: t.port, method: t.method, path: t.path, headers: t.headers, agent }, (res) => {
      const status = res.statusCode ?? 0;
      const header = res.headers['server-timing'];
      const timing = Array.isArray(header) ? header.join(', ') : header;
      if (status >= 200 && status < 300) {
        res.on('end', () => resolve({ status, timing })).resume();
        return;
      }
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status, error: `${status} ${Buffer.concat(chunks).toString('utf8').slice(0, 300)}` }));
    });
    req.setTimeout(timeoutMs, () => req.destroy(new Error(`no answer within ${timeoutMs} ms`)));
    req.on('error', (err) => resolve({ status: 0, error: err.message }));
    req.end(t.body);
  });
}

/** `n` requests on `agent`, one after another: each answer with its client-side time (ms). */
export async function sendBlock(agent: http.Agent, t: Target, n: number, timeoutMs = 60_000): Promise<(Answer & { ms: number })[]> {
  const answers: (Answer & { ms: number })[] = [];
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    const a = await send(agent, t, timeoutMs);
    answers.push({ ...a, ms: performance.now() - t0 });
  }
  return answers;
}

/** Whether p settles within ms (the timer is cleared either way). */
async function settlesWithin(p: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<false>((resolve) => (timer = setTimeout(() => resolve(false), ms)));
  try {
    return await Promise.race([p.then(() => true), timeout]);
  } finally {
    clearTimeout(timer);
  }
}

const TIMING_ENTRY = /([\w-]+);dur=([\d.]+)/g;

/** A Server-Timing header's entries: name and duration (ms). */
const timingEntries = (header: string): [string, number][] => [...header.matchAll(TIMING_ENTRY)].map((m) => [m[1], Number(m[2])]);

/** Adds each entry's duration to its list in `sums`. */
function addTiming(entries: [string, number][], sums: Map<string, number[]>): void {
  for (const [name, ms] of entries) {
    const list = sums.get(name) ?? [];
    list.push(ms);
    sums.set(name, list);
  }
}

/** Adds each Server-Timing entry's duration to its list in `sums`. */
export function parseTiming(header: string, sums: Map<string, number[]>): void {
  addTiming(timingEntries(header), sums);
}

/** A load run with what it measured, so runs can be pooled (poolRuns). */
export interface LoadRun {
  result: LoadResult;
  samples: number[];
  timings: Map<string, number[]>;
}

export async function closedLoop(target: Target, o: LoadOptions): Promise<LoadResult> {
  return (await closedLoopRun(target, o)).result;
}

/**
 * Several runs of one target as one: requests and seconds summed, percentiles over all their
 * samples, Server-Timing means over all answers.
 */
export function poolRuns(runs: readonly LoadRun[]): LoadResult {
  const results = runs.map((r) => r.result);
  const sum = (f: (r: LoadResult) => number) => results.reduce((a, r) => a + f(r), 0);
  const timings = new Map<string, number[]>();
  for (const r of runs) for (const [k, v] of r.timings) timings.set(k, [...(timings.get(k) ?? []), ...v]);
  const statuses: Record<string, number> = {};
  for (const r of results) for (const [k, n] of Object.entries(r.statuses)) statuses[k] = (statuses[k] ?? 0) + n;
  const requests = sum((r) => r.requests);
  const seconds = sum((r) => r.seconds);
  return {
    concurrency: results[0].concurrency,
    requests,
    errors: sum((r) => r.errors),
    seconds,
    reqPerSec: seconds > 0 ? requests / seconds : 0,
    latencyMs: latency(runs.flatMap((r) => r.samples)),
    serverTiming: timings.size ? Object.fromEntries([...timings].map(([k, v]) => [k, mean(v)])) : undefined,
    statuses,
    warmupSeconds: sum((r) => r.warmupSeconds),
    abandoned: sum((r) => r.abandoned),
    firstError: results.find((r) => r.firstError)?.firstError,
    ...(results.some((r) => r.slowest) ? { slowest: results.flatMap((r) => r.slowest ?? []).sort((x, y) => y.ms - x.ms).slice(0, SLOWEST_KEPT) } : {}),
  };
}

export async function closedLoopRun(target: Target, o: LoadOptions): Promise<LoadRun> {
  const { concurrency, window: w } = o;
  const maxWarmupMs = Math.max(o.maxWarmupMs ?? 30_000, w.warmupMs);
  const drainMs = o.drainMs ?? 60_000;
  const maxRequests = o.maxRequests ?? 500_000;
  const timeoutMs = o.timeoutMs ?? 60_000;
  const agent = new http.Agent({ keepAlive: true, maxSockets: concurrency, maxFreeSockets: concurrency });
  const headers = { ...target.headers, ...(target.body ? { 'content-length': String(target.body.length) } : {}) };
  const t = { ...target, headers };

  const started = performance.now();
  let measureStart = Number.POSITIVE_INFINITY;
  let measureEnd = Number.POSITIVE_INFINITY;
  const answeredWorkers = new Set<number>();
  const samples: number[] = [];
  const statuses: Record<string, number> = {};
  const timings = new Map<string, number[]>();
  const slowest: SlowAnswer[] = [];
  let sent = 0;
  let inFlight = 0;
  let errors = 0;
  let firstError: string | undefined;

  // Warm-up ends once it has lasted warmupMs and every worker has had an answer (a closed loop
  // at high concurrency needs one full round before it is in its steady state).
  const openWindow = (now: number) => {
    if (measureStart !== Number.POSITIVE_INFINITY) return;
    const warm = now - started >= w.warmupMs && answeredWorkers.size === concurrency;
    if (warm || now - started >= maxWarmupMs) {
      measureStart = now;
      measureEnd = now + w.measureMs;
    }
  };
  const tick = setInterval(() => openWindow(performance.now()), 20);

  const worker = async (id: number) => {
    while (sent < maxRequests && performance.now() < measureEnd) {
      sent++;
      inFlight++;
      const t0 = performance.now();
      const a = await send(agent, t, timeoutMs);
      const t1 = performance.now();
      inFlight--;
      answeredWorkers.add(id);
      openWindow(t1);
      if (o.thinkMs) await new Promise((r) => setTimeout(r, o.thinkMs));
      if (t1 < measureStart || t1 > measureEnd) continue;
      statuses[a.status] = (statuses[a.status] ?? 0) + 1;
      if (a.status >= 200 && a.status < 300) {
        samples.push(t1 - t0);
        const entries = a.timing ? timingEntries(a.timing) : [];
        addTiming(entries, timings);
        if (slowest.length < SLOWEST_KEPT || t1 - t0 > slowest[slowest.length - 1].ms) {
          slowest.push({ ms: t1 - t0, atS: (t0 - measureStart) / 1000, timing: Object.fromEntries(entries) });
          slowest.sort((x, y) => y.ms - x.ms).splice(SLOWEST_KEPT);
        }
      } else {
        errors++;
        firstError ??= a.error;
      }
    }
  };

  const all = Promise.all(Array.from({ length: concurrency }, (_, i) => worker(i)));
  // Wait for the window to close (or for the workers to stop early), then for what is in flight.
  const hardEnd = started + maxWarmupMs + w.measureMs;
  while (performance.now() < Math.min(measureEnd, hardEnd) && !(await settlesWithin(all, 50)));
  const drained = await settlesWithin(all, drainMs);
  clearInterval(tick);
  const abandoned = drained ? 0 : inFlight;
  agent.destroy();

  const seconds = Math.max(0, Math.min(measureEnd, performance.now()) - measureStart) / 1000;
  const serverTiming = timings.size ? Object.fromEntries([...timings].map(([k, v]) => [k, mean(v)])) : undefined;
  const result: LoadResult = {
    concurrency,
    requests: samples.length,
    errors,
    seconds,
    reqPerSec: seconds > 0 ? samples.length / seconds : 0,
    latencyMs: latency(samples),
    serverTiming,
    statuses,
    warmupSeconds: Number.isFinite(measureStart) ? (measureStart - started) / 1000 : 0,
    abandoned,
    firstError,
    ...(slowest.length ? { slowest } : {}),
  };
  return { result, samples, timings };
}
