// `BENCH_ONLY=fleet`: many functions on one node. 200 functions (most without models, some with
// the cls or the ocr models) deployed on a fresh `embers dev`, and a synthetic trace shaped like
// the Azure Functions 2019 trace (bench/fleet-trace.ts) replayed open-loop, once per keep-alive
// policy: fixed 60 s, fixed 600 s and learned ('auto'). Each policy starts from the same learned
// history (the hour before, as a platform that has been running keeps it in Redis), and the two
// minutes before the measurement are replayed unmeasured, so it starts from a running platform
// rather than from every function cold at once.
// Measured per policy: requests, 5xx, lost, the cold-start fraction, p50/p99 of cold and warm
// requests, and idle replica-seconds (replicas alive while their function had nothing in flight).
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Redis } from 'ioredis';
import { EmbersClient } from '../cli/client.ts';
import { bundleFunction, extractManifest, resolveModelFile, uploadModel } from '../cli/deploy.ts';
import { type DeploySpec } from '../core/contracts.ts';
import { startLocalRedis, type LocalRedis } from '../platform/local-redis.ts';
import { DEFAULT_TRACE, makeTrace, type Kind, type Trace } from './fleet-trace.ts';
import { testImage } from './image.ts';
import { launchEmbers, ROOT, type EmbersProcess } from './servers.ts';
import { latency, sleep, type Latency } from './stats.ts';
import { keys } from '../core/keys.ts';

export interface Policy {
  name: string;
  /** What BENCH_FLEET_POLICIES names it by. */
  key: string;
  idleTimeoutS: number | 'auto';
  keepAlive: 'fixed' | 'auto';
}

export const POLICIES: Policy[] = [
  { name: 'fixed 60 s', key: 'fixed-60', idleTimeoutS: 60, keepAlive: 'fixed' },
  { name: 'fixed 600 s', key: 'fixed-600', idleTimeoutS: 600, keepAlive: 'fixed' },
  { name: 'auto', key: 'auto', idleTimeoutS: 'auto', keepAlive: 'auto' },
];

export interface PolicyResult {
  policy: string;
  requests: number;
  ok: number;
  status5xx: number;
  /** 5xx, other and lost count the warm-up's requests too. Answered with anything else than 200 or 5xx. */
  otherStatus: number;
  /** No answer within REQUEST_TIMEOUT_MS, or the connection failed. */
  lost: number;
  /** Answers other than 200, by status and error code (`504 queue_timeout`), warm-up included. */
  errors: Record<string, number>;
  cold: number;
  coldFraction: number;
  coldMs: Latency;
  warmMs: Latency;
  /** Replica-seconds of replicas alive while their function had no request in flight. */
  idleReplicaSeconds: number;
  replicaSeconds: number;
  peakReplicas: number;
  seconds: number;
}

export interface FleetTrace {
  functions: number;
  byKind: Record<Kind, number>;
  requests: number;
  warmupRequests: number;
  functionsCalled: number;
  calledAtMostTwice: number;
  seconds: number;
  seed: number;
}

/** How often the replicas of every function are counted. */
const SAMPLE_MS = 1_000;
const REQUEST_TIMEOUT_MS = 120_000;
/** Deploys in flight at once. */
const DEPLOY_PARALLEL = 8;

/** Bundle, manifest and model files of each kind of function, bundled once for every run. */
export interface Template {
  bundle: string;
  raw: Partial<DeploySpec> & { models?: Record<string, string> };
  source: string;
}

const TEMPLATE_FILES: Record<Kind, string> = { tiny: 'bench/functions/fleet-tiny.ts', cls: 'bench/functions/cls-batched.ts', ocr: 'functions/ocr/index.ts' };

export async function templates(): Promise<Record<Kind, Template>> {
  const out: Partial<Record<Kind, Template>> = {};
  for (const [kind, file] of Object.entries(TEMPLATE_FILES) as [Kind, string][]) {
    const source = path.join(ROOT, file);
    const bundle = await bundleFunction(source);
    out[kind] = { bundle: bundle.toString('base64'), raw: (await extractManifest(bundle, file)) as Template['raw'], source };
  }
  return out as Record<Kind, Template>;
}

/** Deploys `names` (name → kind) with `idleTimeoutS`; models are uploaded once per kind. */
export async function deployMany(embers: { port: number; apiKey: string }, tpl: Record<Kind, Template>, names: [string, Kind][], idleTimeoutS: number | 'auto'): Promise<void> {
  const client = new EmbersClient({ url: `http://127.0.0.1:${embers.port}`, apiKey: embers.apiKey });
  const specs = new Map<Kind, Record<string, unknown>>();
  for (const kind of new Set(names.map(([, k]) => k))) {
    const t = tpl[kind];
    const models: Record<string, string> = {};
    for (const [handle, ref] of Object.entries(t.raw.models ?? {})) models[handle] = await uploadModel(client, await resolveModelFile(ref, t.source));
    specs.set(kind, { ...t.raw, models });
  }
  const queue = [...names];
  await Promise.all(
    Array.from({ length: DEPLOY_PARALLEL }, async () => {
      for (let next = queue.shift(); next; next = queue.shift()) {
        const [name, kind] = next;
        const base = specs.get(kind)!;
        const scaling = { ...(base.scaling as object), idleTimeoutS };
        await client.call('POST', '/v1/functions', { spec: { ...base, name, scaling }, bundle: tpl[kind].bundle });
      }
    }),
  );
}

export function describeTrace(t: Trace, seconds: number, seed: number): FleetTrace {
  const per = new Map<string, number>();
  for (const r of t.requests) per.set(r.fn, (per.get(r.fn) ?? 0) + 1);
  const byKind = { tiny: 0, cls: 0, ocr: 0 };
  for (const f of t.functions) byKind[f.kind]++;
  return { functions: t.functions.length, byKind, requests: t.requests.length, warmupRequests: t.warmup.length, functionsCalled: per.size, calledAtMostTwice: [...per.values()].filter((n) => n <= 2).length, seconds, seed };
}

interface Outcome {
  status: number;
  /** The error body's code, for answers other than 200. */
  code?: string;
  ms: number;
  cold: boolean;
  measured: boolean;
}

/** The `error.code` of an error body, or '?'. */
function errorCode(body: string): string {
  try {
    return (JSON.parse(body) as { error?: { code?: string } }).error?.code ?? '?';
  } catch {
    return '?';
  }
}

/** Replays `trace` on a fresh `embers dev` under `policy`. */
async function replay(policy: Policy, trace: Trace, tpl: Record<Kind, Template>, bodies: Record<Kind, string>, log: (line: string) => void): Promise<PolicyResult> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'embers-fleet-'));
  let redis: LocalRedis | undefined;
  let embers: EmbersProcess | undefined;
  let client: Redis | undefined;
  try {
    redis = await startLocalRedis(path.join(dir, 'redis'), { persist: false });
    client = new Redis(redis.url);
    // What a running platform would have learned: the same history for every policy (fixed ones ignore it).
    const learned = Object.fromEntries(Object.entries(trace.history).filter(([, gaps]) => gaps.length).map(([fn, gaps]) => [fn, JSON.stringify(gaps)]));
    if (Object.keys(learned).length) await client.hset(keys.idleTimes, learned);
    embers = await launchEmbers({ dataDir: path.join(dir, 'data'), env: { EMBERS_REDIS_URL: redis.url, EMBERS_KEEP_ALIVE: policy.keepAlive } });
    const kindOf = new Map(trace.functions.map((f) => [f.name, f.kind]));
    log(`fleet ${policy.name}: deploying ${trace.functions.length} functions`);
    await deployMany(embers, tpl, trace.functions.map((f) => [f.name, f.kind]), policy.idleTimeoutS);
    // Every function at zero before the trace starts (a deploy starts nothing).
    await sleep(3_000);
    log(`fleet ${policy.name}: replaying ${trace.warmup.length} requests unmeasured, then ${trace.requests.length} over ${Math.round((trace.requests.at(-1)?.at ?? 0) / 1000)} s`);
    const inFlight = new Map<string, number>();
    const outcomes: Outcome[] = [];
    let replicaSeconds = 0;
    let idleReplicaSeconds = 0;
    let peakReplicas = 0;
    const names = trace.functions.map((f) => f.name);
    let sampling = true;
    // The measurement starts after the warm-up.
    const t0 = performance.now() + 1_000 - (trace.warmup[0]?.at ?? 0);
    const sampler = (async () => {
      let last = t0;
      while (sampling) {
        await sleep(SAMPLE_MS);
        const res = (await client!.pipeline(names.map((n) => ['scard', keys.replicas(n)])).exec()) ?? [];
        const now = performance.now();
        if (now < t0) continue;
        const dt = (now - last) / 1000;
        last = now;
        let total = 0;
        names.forEach((n, i) => {
          const count = Number(res[i]?.[1]) || 0;
          total += count;
          if (!inFlight.get(n)) idleReplicaSeconds += count * dt;
        });
        replicaSeconds += total * dt;
        peakReplicas = Math.max(peakReplicas, total);
      }
    })();
    const url = `http://127.0.0.1:${embers.port}/v1/run/`;
    const headers = { authorization: `Bearer ${embers.apiKey}`, 'content-type': 'application/json' };
    const sent = [...trace.warmup, ...trace.requests].map(async (r) => {
      await sleep(Math.max(0, t0 + r.at - performance.now()));
      const measured = r.at >= 0;
      inFlight.set(r.fn, (inFlight.get(r.fn) ?? 0) + 1);
      const start = performance.now();
      try {
        const res = await fetch(url + r.fn, { method: 'POST', headers, body: bodies[kindOf.get(r.fn)!], signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS) });
        const body = await res.text();
        const code = res.status === 200 ? undefined : errorCode(body);
        outcomes.push({ status: res.status, ...(code ? { code } : {}), ms: performance.now() - start, cold: res.headers.has('embers-cold-start'), measured });
      } catch {
        outcomes.push({ status: 0, ms: performance.now() - start, cold: false, measured });
      } finally {
        inFlight.set(r.fn, inFlight.get(r.fn)! - 1);
      }
    });
    await Promise.all(sent);
    const seconds = (performance.now() - t0) / 1000;
    sampling = false;
    await sampler;
    // Errors count over the warm-up too; the rest over the measurement.
    const measured = outcomes.filter((o) => o.measured);
    const ok = measured.filter((o) => o.status === 200);
    const cold = ok.filter((o) => o.cold);
    return {
      policy: policy.name,
      requests: measured.length,
      ok: ok.length,
      status5xx: outcomes.filter((o) => o.status >= 500).length,
      otherStatus: outcomes.filter((o) => o.status !== 200 && o.status !== 0 && o.status < 500).length,
      lost: outcomes.filter((o) => o.status === 0).length,
      errors: outcomes.filter((o) => o.status !== 200 && o.status !== 0).reduce<Record<string, number>>((a, o) => ({ ...a, [`${o.status} ${o.code}`]: (a[`${o.status} ${o.code}`] ?? 0) + 1 }), {}),
      cold: cold.length,
      coldFraction: measured.length ? cold.length / measured.length : Number.NaN,
      coldMs: latency(cold.map((o) => o.ms)),
      warmMs: latency(ok.filter((o) => !o.cold).map((o) => o.ms)),
      idleReplicaSeconds,
      replicaSeconds,
      peakReplicas,
      seconds,
    };
  } finally {
    client?.disconnect();
    await embers?.stop();
    await redis?.stop();
    await rm(dir, { recursive: true, force: true });
  }
}

export interface FleetPolicies {
  trace: FleetTrace;
  policies: PolicyResult[];
}

/** Every policy over the same trace, one after another on fresh platforms. */
export async function fleetPolicies(log: (line: string) => void, seconds = Number(process.env.BENCH_FLEET_SECONDS) || DEFAULT_TRACE.seconds): Promise<FleetPolicies> {
  const trace = makeTrace({ ...DEFAULT_TRACE, seconds });
  const tpl = await templates();
  const image = await testImage();
  const bodies: Record<Kind, string> = { tiny: JSON.stringify({ n: 7 }), cls: JSON.stringify({ seed: 7 }), ocr: JSON.stringify({ image }) };
  const policies: PolicyResult[] = [];
  const only = process.env.BENCH_FLEET_POLICIES?.split(',').map((p) => p.trim());
  for (const policy of POLICIES.filter((p) => !only || only.includes(p.key))) policies.push(await replay(policy, trace, tpl, bodies, log));
  return { trace: describeTrace(trace, seconds, DEFAULT_TRACE.seed), policies };
}

/** The resident memory of process `pid`, in bytes (Linux). */
export async function rssOf(pid: number): Promise<number> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8');
  return Number(/VmRSS:\s+(\d+) kB/.exec(status)?.[1] ?? Number.NaN) * 1024;
}
