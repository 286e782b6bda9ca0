// The two servers under test, as child processes: Embers (`embers dev`, which deploys
// functions/) and the naive baseline (bench/naive-server.ts).
import { execFile } from 'node:child_process';
import { rmSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { startChild, type Child } from './child.ts';
import type { Target } from './load.ts';
import { sleep } from './stats.ts';
import type { ColdStartPhases } from '../core/contracts.ts';
import { BENCH_PROVIDERS, type ThreadSetting } from './ort.ts';

export const ROOT = fileURLToPath(new URL('..', import.meta.url));

/** The body every section sends to `echo`. */
export const ECHO_BODY = '{"hello":"embers"}';

/** POST /v1/run/echo on a running Embers, the overhead probe. */
export const echoTarget = (embers: { port: number; apiKey: string }): Target => ({
  port: embers.port,
  method: 'POST',
  path: '/v1/run/echo',
  headers: { authorization: `Bearer ${embers.apiKey}`, 'content-type': 'application/json' },
  body: Buffer.from(ECHO_BODY),
});

/** Replicas write their record (state, batching counters) to Redis on this period (EMBERS_HEARTBEAT_MS default). */
export const HEARTBEAT_MS = 2000;

/** Environment without the caller's EMBERS_* settings: the embedded defaults are what is measured. */
export function cleanEnv(extra: Record<string, string>): NodeJS.ProcessEnv {
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('EMBERS_')));
  return { ...env, ...extra };
}

const pexec = promisify(execFile);

/** Deploys bench function files (paths from the repo root) to a running Embers with `embers deploy`. */
export async function deployFunctions(embers: { port: number; apiKey: string }, files: string[]): Promise<void> {
  await pexec(process.execPath, ['cli/bin.mjs', 'deploy', ...files, '--url', `http://127.0.0.1:${embers.port}`, '--key', embers.apiKey], { cwd: ROOT, env: cleanEnv({}), timeout: 180_000 });
}

export interface BatchCounters {
  /** The execution provider in use, and why it is not the one asked for, if it is not. */
  provider?: string;
  fallback?: string;
  instances?: number;
  requests: number;
  inferences: number;
  executions: number;
  maxCallsPerBatch: number;
  /** Executions on the inline session (every core). */
  wide?: number;
  /** Where a lone request's inferences go, and each side's median cost (ms per million input values). */
  lone?: LoneChoice;
}

export interface LoneChoice {
  choice: 'wide' | 'narrow';
  wide: number | null;
  narrow: number | null;
}

export interface EmbersServer {
  port: number;
  apiKey: string;
  child: Child;
  startupSeconds: number;
  /** Its data folder (its Redis's port is in redis/port). */
  dataDir: string;
  /** GET /v1/functions/:name with the key. */
  describe(name: string): Promise<FunctionView>;
  stop(): Promise<void>;
}

/** A replica's start as `GET /v1/functions/:name` lists it. */
export interface ColdStartRecord extends ColdStartPhases {
  replica: string;
  at: string;
}

interface FunctionView {
  replicas: { id: string; state: string; models?: Record<string, BatchCounters> }[];
  /** Newest first. */
  coldStarts?: ColdStartRecord[];
}

/** A running `embers dev` whose banner has been printed (its functions are deployed). */
export interface EmbersProcess {
  port: number;
  apiKey: string;
  child: Child;
  dataDir: string;
  /** GET /v1/functions/:name with the key. */
  describe(name: string): Promise<FunctionView>;
  /** SIGTERM, wait for exit (SIGKILL to its group after a grace period); removes the data dir if launchEmbers made it. */
  stop(): Promise<void>;
}

/**
 * Starts `embers dev` with EMBERS_DATA_DIR = `dataDir` (left in place on stop), or on a fresh
 * temporary one (removed on stop and on exit), and `env` added, and waits until it prints its
 * URL and key.
 */
export async function launchEmbers(o: { dataDir?: string; timeoutMs?: number; env?: Record<string, string> } = {}): Promise<EmbersProcess> {
  const timeoutMs = o.timeoutMs ?? 180_000;
  const dataDir = o.dataDir ?? (await mkdtemp(path.join(os.tmpdir(), 'embers-bench-')));
  // As `npm start` runs it (package.json), V8 flag included.
  const profile = process.env.BENCH_PROFILE_DIR ? ['--cpu-prof', `--cpu-prof-dir=${process.env.BENCH_PROFILE_DIR}`] : [];
  const child = startChild('embers dev', ['--max-semi-space-size=32', ...profile, 'cli/bin.mjs', 'dev'], {
    cwd: ROOT,
    env: cleanEnv({
      // Port 0: the gateway takes one the OS gives it, and its banner says which.
      EMBERS_PORT: '0',
      EMBERS_DATA_DIR: dataDir,
      // The default level (info: the gateway logs a line per request), as JSON through a pipe:
      // what a user's Embers does. Until the eighth session the bench set warn, which left that
      // line out: ~5–10 % of `echo`'s req/s at c = 32 in A/Bs on one machine.
      EMBERS_LOG_PRETTY: 'false',
      ...(process.env.BENCH_EXECUTION_PROVIDERS ? { EMBERS_EXECUTION_PROVIDERS: BENCH_PROVIDERS.join(',') } : {}),
      ...o.env,
    }),
  });
  // Also removed when this process exits another way (Ctrl-C, an error): by then the child is gone.
  const removeDataDir = () => rmSync(dataDir, { recursive: true, force: true });
  if (!o.dataDir) process.once('exit', removeDataDir);
  const stop = async () => {
    await child.stop();
    if (o.dataDir) return;
    await rm(dataDir, { recursive: true, force: true });
    process.off('exit', removeDataDir);
  };
  try {
    const [, apiKey] = await child.waitFor(/API key:\s+(\S+)/, timeoutMs);
    const url = (await child.waitFor(/Embers is running at (http:\/\/\S+)/, 1000))[1];
    const port = Number(new URL(url).port);
    const describe = async (name: string): Promise<FunctionView> => {
      const res = await fetch(`http://127.0.0.1:${port}/v1/functions/${name}`, { headers: { authorization: `Bearer ${apiKey}` }, signal: AbortSignal.timeout(10_000) });
      if (!res.ok) throw new Error(`GET /v1/functions/${name}: ${res.status} ${await res.text()}`);
      return (await res.json()) as FunctionView;
    };
    return { port, apiKey, child, dataDir, describe, stop };
  } catch (err) {
    await stop();
    throw err;
  }
}

/** Starts `embers dev` and waits for a ready replica of each function in `wakeUp` (name → a valid request body). */
export async function startEmbers(wakeUp: Record<string, string>, timeoutMs = 180_000): Promise<EmbersServer> {
  const t0 = performance.now();
  const embers = await launchEmbers({ timeoutMs });
  const { port, apiKey, child, describe, stop } = embers;
  try {
    // Functions may scale from zero: a first call (answered once a replica is up) is the demand
    // that starts one.
    const end = Date.now() + timeoutMs;
    for (const [name, body] of Object.entries(wakeUp)) {
      let woken = false;
      while (!(await describe(name).catch(() => undefined))?.replicas.some((r) => r.state === 'ready')) {
        if (Date.now() > end) throw new Error(`no ready replica of ${name} within ${timeoutMs / 1000} s:\n${child.tail}`);
        if (!woken) {
          woken = true;
          void fetch(`http://127.0.0.1:${port}/v1/run/${name}`, {
            method: 'POST',
            headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' },
            body,
            signal: AbortSignal.timeout(timeoutMs),
          })
            .then((r) => r.arrayBuffer())
            .catch(() => {});
        }
        await sleep(200);
      }
    }
    return { port, apiKey, child, describe, stop, dataDir: embers.dataDir, startupSeconds: (performance.now() - t0) / 1000 };
  } catch (err) {
    await stop();
    throw err;
  }
}

/** Batching counters per replica id, then per model, of the function's ready replicas. */
export type CounterSnapshot = Record<string, Record<string, BatchCounters>>;

export async function batchCounters(server: EmbersServer, name: string): Promise<CounterSnapshot> {
  const view = await server.describe(name);
  return Object.fromEntries(view.replicas.filter((r) => r.state === 'ready' && r.models).map((r) => [r.id, r.models!]));
}

export interface BatchDelta {
  /** Δinferences / Δexecutions: mean rows per execution. */
  meanBatch: number;
  /** Δrequests / Δexecutions: mean run() calls per execution. */
  meanCalls: number;
  executions: number;
  inferences: number;
  maxCallsPerBatch: number;
  /** Δ executions on every core (the inline session). */
  wide: number;
  /** The chooser's state at the end (the first replica that has one). */
  lone?: LoneChoice;
}

/**
 * Per model, what the replicas did between two snapshots, summed over replicas (a replica that
 * appeared in between counts from zero; one that went away takes its counts with it).
 */
/**
 * A function's batching counters once its replica records have been rewritten after the load
 * stopped (they are, every heartbeat), so they hold everything a point did, and before a
 * scale-down can take a replica's counts away.
 */
export async function settledCounters(server: EmbersServer, name: string): Promise<CounterSnapshot> {
  await sleep(HEARTBEAT_MS + 500);
  return batchCounters(server, name);
}

/** POST of a JSON body; the answer's JSON, or an error naming the status and body. */
export async function postJson(port: number, route: string, body: string, headers: Record<string, string> = {}, timeoutMs = 60_000): Promise<unknown> {
  const res = await fetch(`http://127.0.0.1:${port}${route}`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body, signal: AbortSignal.timeout(timeoutMs) });
  if (!res.ok) throw new Error(`POST ${route}: ${res.status} ${await res.text()}`);
  return res.json();
}

export function batchDelta(before: CounterSnapshot, after: CounterSnapshot): Record<string, BatchDelta> {
  const sums: Record<string, { requests: number; inferences: number; executions: number; maxCallsPerBatch: number; wide: number; lone?: LoneChoice }> = {};
  for (const [id, models] of Object.entries(after)) {
    for (const [model, c] of Object.entries(models)) {
      const b = before[id]?.[model];
      const s = (sums[model] ??= { requests: 0, inferences: 0, executions: 0, maxCallsPerBatch: 0, wide: 0 });
      s.wide += (c.wide ?? 0) - (b?.wide ?? 0);
      s.lone ??= c.lone;
      s.requests += c.requests - (b?.requests ?? 0);
      s.inferences += c.inferences - (b?.inferences ?? 0);
      s.executions += c.executions - (b?.executions ?? 0);
      s.maxCallsPerBatch = Math.max(s.maxCallsPerBatch, c.maxCallsPerBatch);
    }
  }
  return Object.fromEntries(
    Object.entries(sums).map(([model, s]) => [
      model,
      {
        meanBatch: s.executions ? s.inferences / s.executions : Number.NaN,
        meanCalls: s.executions ? s.requests / s.executions : Number.NaN,
        executions: s.executions,
        inferences: s.inferences,
        maxCallsPerBatch: s.maxCallsPerBatch,
        wide: s.wide,
        ...(s.lone ? { lone: s.lone } : {}),
      },
    ]),
  );
}

export interface NaiveServer {
  port: number;
  /** Intra-op threads per ORT session, as the server counted the threads its sessions started. */
  intraOpThreads?: number;
  child: Child;
  stop(): Promise<void>;
}

/** The naive server; with `setting`, its sessions take the platform's options with that thread setting (the plain server). */
export async function startNaive(o: { setting?: ThreadSetting; timeoutMs?: number } = {}): Promise<NaiveServer> {
  const timeoutMs = o.timeoutMs ?? 60_000;
  const s = o.setting;
  const env = cleanEnv({ NAIVE_PORT: '0', ...(s ? { NAIVE_ORT_THREADS: String(s.threads), ...(s.spin ? { NAIVE_ORT_SPIN: '1' } : {}) } : {}) });
  const child = startChild(s ? 'plain server' : 'naive server', ['--import', 'tsx', 'bench/naive-server.ts'], { cwd: ROOT, env });
  try {
    const [, port, threads] = await child.waitFor(/listening (\d+) intra-op (\d+|\?)/, timeoutMs);
    return { port: Number(port), ...(threads === '?' ? {} : { intraOpThreads: Number(threads) }), child, stop: () => child.stop() };
  } catch (err) {
    await child.stop();
    throw err;
  }
}
