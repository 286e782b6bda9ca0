// `BENCH_ONLY=hostile`: what a hostile tenant costs its neighbours on one `embers dev`. A second
// tenant's function floods the channel to its replica (announce, log and junk floods in turn, sent
// again as soon as a replica takes requests) for FLOOD_S while the default tenant's echo runs in a
// closed loop, against echo alone; and forges "busy" every 300 ms (armed once, for as long as its
// process lives) while a classifier batch runs, against the batch alone. The attacking functions
// are the integration test's (test/fixtures/functions/flooder.ts, forger.ts).
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import type { BatchView } from '../core/batches.ts';
import { closedLoop, closedLoopRun, type LoadResult } from './load.ts';
import { errorsNote, num, table } from './format.ts';
import { deployFunctions, ECHO_BODY, echoTarget, startEmbers, type EmbersServer } from './servers.ts';
import { sleep } from './stats.ts';

const FLOOD_S = 10;
const WARMUP_MS = 2_000;
const CONCURRENCY = 32;
const ATTACKS = ['announce', 'log-flood', 'junk'] as const;
/** Classifier lines per batch: a few seconds alone on a small machine. */
const BATCH_LINES = Number(process.env.BENCH_HOSTILE_BATCH_LINES ?? 3000);
/** The batch beside the forger is given up on (and cancelled) after this many times its time alone. */
const BATCH_GIVE_UP_RATIO = 10;

export interface HostileSection {
  floodSeconds: number;
  concurrency: number;
  echo: { alone: LoadResult; flooded: LoadResult };
  /** The flooding requests: how they were answered (500 once the replica ends a process that breaks the channel). */
  flood: { attacks: string[]; requests: number; statuses: Record<string, number> };
  /** The flooding function's replica processes (the trusted side), sampled every 100 ms. */
  replicaRss: { processes: number; peakBytes: number; peakGrowthBytes: number };
  batch: {
    lines: number;
    /** From in progress to completed, s; null where it did not complete within BATCH_GIVE_UP_RATIO × alone. */
    aloneSeconds: number;
    forgedSeconds: number | null;
    /** How the arming request was answered. */
    forgerArmed: number;
  };
  ratios: {
    /** echo req/s during the flood ÷ alone. */
    echo_during_flood: number;
    /** Batch time beside a forged "busy" ÷ alone (the issue asks ≤ 1.5); null: it did not finish. */
    batch_beside_forged_busy: number | null;
  };
}

type Fetch = (method: string, route: string, body?: string, timeoutMs?: number) => Promise<Response>;

const as = (embers: EmbersServer, key: string): Fetch => (method, route, body, timeoutMs = 60_000) =>
  fetch(`http://127.0.0.1:${embers.port}${route}`, { method, headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body, signal: AbortSignal.timeout(timeoutMs) });

async function json<T>(res: Promise<Response>, what: string): Promise<T> {
  const r = await res;
  if (!r.ok) throw new Error(`${what}: ${r.status} ${await r.text()}`);
  return (await r.json()) as T;
}

/** A tenant of its own for the attacker, and a key of it (with the admin key `embers dev` keeps in its data folder). */
async function attackerKey(embers: EmbersServer): Promise<string> {
  const admin = as(embers, (await readFile(path.join(embers.dataDir, 'admin-key'), 'utf8')).trim());
  const { id } = await json<{ id: string }>(admin('POST', '/v1/tenants', JSON.stringify({ name: 'hostile' })), 'creating a tenant');
  return (await json<{ key: string }>(admin('POST', `/v1/tenants/${id}/keys`, '{}'), 'creating its key')).key;
}

async function rss(pid: number): Promise<number | undefined> {
  const kb = /^VmRSS:\s+(\d+)/m.exec(await readFile(`/proc/${pid}/status`, 'utf8').catch(() => ''))?.[1];
  return kb === undefined ? undefined : Number(kb) * 1024;
}

/** Samples the RSS of `fn`'s replica processes (new ones as they appear) until stopped. */
function watchReplicas(api: Fetch, fn: string): { stop(): Promise<HostileSection['replicaRss']> } {
  const first = new Map<number, number>();
  let peak = 0;
  let growth = 0;
  let done = false;
  let pids: number[] = [];
  const listing = (async () => {
    while (!done) {
      const view = await json<{ replicas: { pid?: number }[] }>(api('GET', `/v1/functions/${fn}`), fn).catch(() => ({ replicas: [] }));
      pids = view.replicas.flatMap((r) => (r.pid ? [r.pid] : []));
      await sleep(500);
    }
  })();
  const sampling = (async () => {
    while (!done) {
      for (const pid of pids) {
        const now = await rss(pid);
        if (now === undefined) continue;
        if (!first.has(pid)) first.set(pid, now);
        peak = Math.max(peak, now);
        growth = Math.max(growth, now - first.get(pid)!);
      }
      await sleep(100);
    }
  })();
  return {
    async stop() {
      done = true;
      await Promise.all([listing, sampling]);
      return { processes: first.size, peakBytes: peak, peakGrowthBytes: growth };
    },
  };
}

/** Runs a classifier batch; seconds from in progress to completed, or null once it ran `giveUpMs` (then it is cancelled). */
async function timedBatch(api: Fetch, lines: number, tag: string, giveUpMs: number): Promise<number | null> {
  const jsonl = Array.from({ length: lines }, (_, i) => JSON.stringify({ custom_id: `${tag}${i}`, input: { seed: i } })).join('\n');
  const created = await json<BatchView>(api('POST', '/v1/batches?function=cls-batched', jsonl), 'creating a batch');
  const end = performance.now() + giveUpMs;
  for (;;) {
    const b = await json<BatchView>(api('GET', `/v1/batches/${created.id}`), 'reading a batch');
    if (b.status === 'completed') return (Date.parse(b.completedAt!) - Date.parse(b.inProgressAt ?? b.createdAt)) / 1000;
    if (b.status === 'failed' || b.status === 'cancelled') throw new Error(`the batch ended ${b.status}: ${b.error ?? ''}`);
    if (performance.now() > end) {
      await api('POST', `/v1/batches/${created.id}/cancel`);
      return null;
    }
    await sleep(100);
  }
}

export async function hostileSection(o: { embers: EmbersServer; log: (line: string) => void }): Promise<HostileSection> {
  const { embers, log } = o;
  const key = await attackerKey(embers);
  const own = as(embers, embers.apiKey);
  const attacker = as(embers, key);
  log('hostile: deploying the classifier, and the flooder and forger as a second tenant');
  await deployFunctions(embers, ['bench/functions/cls-batched.ts']);
  await deployFunctions({ port: embers.port, apiKey: key }, ['test/fixtures/functions/flooder.ts', 'test/fixtures/functions/forger.ts']);
  // Cold starts out of the way (the first call of each waits for one).
  await json(attacker('POST', '/v1/run/flooder', '{"attack":"none"}', 180_000), 'warming the flooder');
  await json(attacker('POST', '/v1/run/forger', '{"arm":false}', 180_000), 'warming the forger');
  await json(own('POST', '/v1/run/cls-batched', '{"seed":1}', 180_000), 'warming the classifier');

  const echo = echoTarget(embers);
  const window = { warmupMs: WARMUP_MS, measureMs: FLOOD_S * 1000 };
  log(`hostile: echo c=${CONCURRENCY} alone, ${FLOOD_S} s`);
  const alone = await closedLoop(echo, { concurrency: CONCURRENCY, window });

  log(`hostile: echo c=${CONCURRENCY} while the flooder floods (${ATTACKS.join(', ')}), ${FLOOD_S} s`);
  const statuses: Record<string, number> = {};
  let requests = 0;
  const memory = watchReplicas(attacker, 'flooder');
  // The flood covers echo's warm-up and its whole measured window.
  const floodEnd = performance.now() + WARMUP_MS + FLOOD_S * 1000 + 1000;
  const flood = (async () => {
    for (let i = 0; performance.now() < floodEnd; i++) {
      const seconds = Math.min(3, Math.max(0.1, (floodEnd - performance.now()) / 1000));
      const res = await attacker('POST', '/v1/run/flooder', JSON.stringify({ attack: ATTACKS[i % ATTACKS.length], seconds })).catch(() => undefined);
      await res?.arrayBuffer().catch(() => {});
      requests++;
      statuses[res?.status ?? 'none'] = (statuses[res?.status ?? 'none'] ?? 0) + 1;
    }
  })();
  const flooded = (await closedLoopRun(echo, { concurrency: CONCURRENCY, window })).result;
  await flood;
  const replicaRss = await memory.stop();
  log(`hostile: echo ${alone.reqPerSec.toFixed(0)} req/s alone, ${flooded.reqPerSec.toFixed(0)} req/s flooded; flooder answered ${JSON.stringify(statuses)}; replica RSS +${mib(replicaRss.peakGrowthBytes)} MiB at most`);

  log(`hostile: a ${BATCH_LINES}-line classifier batch alone, then beside an armed forger`);
  await timedBatch(own, 50, 'warm', 180_000);
  const aloneSeconds = await timedBatch(own, BATCH_LINES, 'alone', 600_000);
  if (aloneSeconds === null) throw new Error('the batch alone did not finish in 10 minutes');
  const armed = await attacker('POST', '/v1/run/forger', '{"arm":true}');
  await armed.arrayBuffer().catch(() => {});
  const forgedSeconds = await timedBatch(own, BATCH_LINES, 'forged', Math.max(30_000, aloneSeconds * 1000 * BATCH_GIVE_UP_RATIO));
  log(`hostile: batch ${aloneSeconds.toFixed(1)} s alone, ${forgedSeconds === null ? `unfinished after ${BATCH_GIVE_UP_RATIO}×` : `${forgedSeconds.toFixed(1)} s`} beside the forger`);

  return {
    floodSeconds: FLOOD_S,
    concurrency: CONCURRENCY,
    echo: { alone, flooded },
    flood: { attacks: [...ATTACKS], requests, statuses },
    replicaRss,
    batch: { lines: BATCH_LINES, aloneSeconds, forgedSeconds, forgerArmed: armed.status },
    ratios: { echo_during_flood: flooded.reqPerSec / alone.reqPerSec, batch_beside_forged_busy: forgedSeconds === null ? null : forgedSeconds / aloneSeconds },
  };
}

export function formatHostile(h: HostileSection): string[] {
  const { ratios: r } = h;
  return [
    `Hostile tenant: a second tenant floods its replica's channel (${h.flood.attacks.join(', ')}) for ${h.floodSeconds} s, and forges "busy" beside a batch`,
    table(
      ['', 'alone', 'hostile neighbour', 'ratio'],
      [
        [`echo c=${h.concurrency} (req/s)`, num(h.echo.alone.reqPerSec, 0), num(h.echo.flooded.reqPerSec, 0), num(r.echo_during_flood, 2)],
        [`batch of ${h.batch.lines} cls lines (s)`, num(h.batch.aloneSeconds, 1), h.batch.forgedSeconds === null ? 'unfinished' : num(h.batch.forgedSeconds, 1), r.batch_beside_forged_busy === null ? '-' : num(r.batch_beside_forged_busy, 2)],
      ],
    ),
    ...errorsNote('echo alone', h.echo.alone),
    ...errorsNote('echo flooded', h.echo.flooded),
    `flooding requests: ${h.flood.requests}, answered ${Object.entries(h.flood.statuses).map(([s, n]) => `${n}× ${s}`).join(', ')}; flooder replica processes: ${h.replicaRss.processes}, RSS peak ${mib(h.replicaRss.peakBytes)} MiB, growth at most ${mib(h.replicaRss.peakGrowthBytes)} MiB (target < 256)`,
    `echo during the flood ÷ alone = ${num(r.echo_during_flood, 2)}; batch beside a forged "busy" ÷ alone = ${r.batch_beside_forged_busy === null ? 'unfinished' : num(r.batch_beside_forged_busy, 2)} (target ≤ 1.5); the forger's arming request: ${h.batch.forgerArmed}`,
  ];
}

const mib = (b: number) => (b / 2 ** 20).toFixed(0);

/** The section alone, on an `embers dev` of its own; writes latest-hostile.json under `results`. */
export async function hostileOnly(results: string, log: (line: string) => void, meta: Record<string, unknown>): Promise<HostileSection> {
  log('hostile: starting embers dev');
  const embers = await startEmbers({ echo: ECHO_BODY });
  try {
    const hostile = await hostileSection({ embers, log });
    await mkdir(results, { recursive: true });
    await writeFile(path.join(results, 'latest-hostile.json'), `${JSON.stringify({ ...meta, hostile, ratios: hostile.ratios }, null, 2)}\n`);
    process.stdout.write(`\n${formatHostile(hostile).join('\n')}\n`);
    return hostile;
  } finally {
    await embers.stop();
  }
}
