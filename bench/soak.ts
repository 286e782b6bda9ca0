// `BENCH_ONLY=soak`: sustained load on one `embers dev` for a few minutes (`echo` from many
// clients at once, plus an `ocr` request a second), sampling what must not grow with it: Redis's
// memory, the gateway's and the replicas' RSS, and how far the usage export lags behind.
import { mkdir, readFile, readdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { createRedis } from '../core/redis.ts';
import { testImage } from './image.ts';
import { closedLoopRun } from './load.ts';
import { num, table } from './format.ts';
import { echoTarget, startEmbers, type EmbersServer } from './servers.ts';

const CONCURRENCY = 32;
const SAMPLE_MS = 10_000;
/** Redis's memory is judged against its level this far in: the first minutes fill caches and pools. */
const SETTLED_MS = 120_000;

export interface SoakSample {
  /** Seconds since the load began. */
  t: number;
  redisUsedBytes: number;
  /** The usage records still in Redis, and the age of the oldest (s): how far the export lags. */
  usageBuffered: number;
  exportLagSeconds: number;
  gatewayRssBytes: number;
  replicasRssBytes: number;
}

export interface SoakSection {
  seconds: number;
  concurrency: number;
  echo: { requests: number; errors: number; reqPerSec: number };
  ocr: { requests: number; errors: number };
  samples: SoakSample[];
  /** Redis's highest used_memory after SETTLED_MS ÷ its highest before (target ≤ 1.2): the export drains it in a sawtooth, so peaks are compared. */
  redisGrowth: number;
  gatewayRss: { start: number; end: number };
  replicasRss: { start: number; end: number };
  exportLag: { max: number; end: number };
}

/** Seconds of load from BENCH_SOAK_SECONDS, 180 by default. */
export const soakSeconds = (env = process.env) => Math.max(30, Number(env.BENCH_SOAK_SECONDS ?? 180) || 180);

export async function soakSection(o: { embers: EmbersServer; seconds: number; log: (line: string) => void }): Promise<SoakSection> {
  const { embers, log } = o;
  const port = Number((await readFile(path.join(o.embers.dataDir, 'redis', 'port'), 'utf8')).trim());
  const redis = createRedis(`redis://127.0.0.1:${port}`);
  const image = await testImage();
  const samples: SoakSample[] = [];
  const began = performance.now();
  let done = false;
  const ocr = { requests: 0, errors: 0 };
  try {
    const sampler = (async () => {
      while (!done) {
        samples.push(await sample(redis, embers.child.pid!, (performance.now() - began) / 1000));
        const s = samples.at(-1)!;
        log(`soak ${s.t.toFixed(0)} s: redis ${mib(s.redisUsedBytes)} MiB, usage buffered ${s.usageBuffered} (${s.exportLagSeconds.toFixed(1)} s behind), gateway ${mib(s.gatewayRssBytes)} MiB, replicas ${mib(s.replicasRssBytes)} MiB`);
        await sleepUnless(SAMPLE_MS, () => done);
      }
    })();
    const trickle = (async () => {
      while (!done) {
        const t0 = performance.now();
        const res = await fetch(`http://127.0.0.1:${embers.port}/v1/run/ocr`, { method: 'POST', headers: { authorization: `Bearer ${embers.apiKey}`, 'content-type': 'application/json' }, body: JSON.stringify({ image }), signal: AbortSignal.timeout(60_000) }).catch(() => null);
        ocr.requests++;
        if (!res?.ok) ocr.errors++;
        await res?.arrayBuffer().catch(() => {});
        await sleepUnless(Math.max(0, 1000 - (performance.now() - t0)), () => done);
      }
    })();
    const target = echoTarget(embers);
    const run = await closedLoopRun(target, { concurrency: CONCURRENCY, window: { warmupMs: 2_000, measureMs: o.seconds * 1000 }, maxRequests: 50_000_000 });
    done = true;
    await Promise.all([sampler, trickle]);
    samples.push(await sample(redis, embers.child.pid!, (performance.now() - began) / 1000));
    const cut = samples.some((s) => s.t * 1000 > SETTLED_MS) ? SETTLED_MS / 1000 : samples[Math.floor(samples.length / 2)].t;
    const peak = (xs: SoakSample[]) => Math.max(...xs.map((s) => s.redisUsedBytes));
    const last = samples.at(-1)!;
    return {
      seconds: o.seconds,
      concurrency: CONCURRENCY,
      echo: { requests: run.result.requests, errors: run.result.errors, reqPerSec: run.result.reqPerSec },
      ocr,
      samples,
      redisGrowth: peak(samples.filter((s) => s.t > cut)) / peak(samples.filter((s) => s.t <= cut)),
      gatewayRss: { start: samples[0].gatewayRssBytes, end: last.gatewayRssBytes },
      replicasRss: { start: samples[0].replicasRssBytes, end: last.replicasRssBytes },
      exportLag: { max: Math.max(...samples.map((s) => s.exportLagSeconds)), end: last.exportLagSeconds },
    };
  } finally {
    done = true;
    redis.disconnect();
  }
}

async function sample(redis: ReturnType<typeof createRedis>, gatewayPid: number, t: number): Promise<SoakSample> {
  const info = await redis.info('memory');
  const used = Number(/used_memory:(\d+)/.exec(info)?.[1] ?? 0);
  const records = 'embers:usage:records';
  const [buffered, oldest] = await Promise.all([redis.xlen(records), redis.xrange(records, '-', '+', 'COUNT', 1)]);
  const oldestMs = oldest[0] ? Number(oldest[0][0].split('-')[0]) : undefined;
  const [{ rss: gateway }, replicas] = await Promise.all([processInfo(gatewayPid), replicasOf(gatewayPid)]);
  return { t, redisUsedBytes: used, usageBuffered: buffered, exportLagSeconds: oldestMs === undefined ? 0 : Math.max(0, (Date.now() - oldestMs) / 1000), gatewayRssBytes: gateway, replicasRssBytes: replicas };
}

/** RSS and parent of a process, from /proc. */
async function processInfo(pid: number): Promise<{ rss: number; ppid: number; name: string }> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8').catch(() => '');
  const field = (k: string) => new RegExp(`^${k}:\\s+(\\S+)`, 'm').exec(status)?.[1] ?? '0';
  return { rss: Number(field('VmRSS')) * 1024, ppid: Number(field('PPid')), name: field('Name') };
}

/** The RSS of every process below the gateway's but Redis: replicas and their user code. */
async function replicasOf(root: number): Promise<number> {
  const pids = (await readdir('/proc')).filter((d) => /^\d+$/.test(d)).map(Number);
  const infos = new Map(await Promise.all(pids.map(async (p) => [p, await processInfo(p)] as const)));
  const below = (p: number): boolean => {
    for (let cur = infos.get(p)?.ppid ?? 0, hops = 0; cur > 1 && hops < 16; cur = infos.get(cur)?.ppid ?? 0, hops++) if (cur === root) return true;
    return false;
  };
  let sum = 0;
  for (const [p, i] of infos) if (below(p) && !i.name.startsWith('redis')) sum += i.rss;
  return sum;
}

export function formatSoak(s: SoakSection): string[] {
  return [
    `Soak: echo at c = ${s.concurrency} and an ocr request a second, ${s.seconds} s`,
    table(
      ['t (s)', 'Redis used (MiB)', 'usage buffered', 'export lag (s)', 'gateway RSS (MiB)', 'replicas RSS (MiB)'],
      s.samples.map((x) => [x.t.toFixed(0), mib(x.redisUsedBytes), num(x.usageBuffered, 0), x.exportLagSeconds.toFixed(1), mib(x.gatewayRssBytes), mib(x.replicasRssBytes)]),
    ),
    `echo: ${num(s.echo.requests, 0)} requests (${s.echo.reqPerSec.toFixed(0)}/s), ${s.echo.errors} errors; ocr: ${s.ocr.requests} requests, ${s.ocr.errors} errors`,
    `Redis memory: highest after ${SETTLED_MS / 1000} s ÷ highest before = ${s.redisGrowth.toFixed(2)} (target ≤ 1.20); gateway RSS ${mib(s.gatewayRss.start)} → ${mib(s.gatewayRss.end)} MiB; replicas ${mib(s.replicasRss.start)} → ${mib(s.replicasRss.end)} MiB; export lag at most ${s.exportLag.max.toFixed(1)} s, ${s.exportLag.end.toFixed(1)} s at the end`,
  ];
}

const mib = (b: number) => (b / 2 ** 20).toFixed(1);

async function sleepUnless(ms: number, stop: () => boolean): Promise<void> {
  const end = performance.now() + ms;
  while (!stop() && performance.now() < end) await new Promise((r) => setTimeout(r, Math.min(250, end - performance.now())));
}

/** The soak alone, on an `embers dev` of its own; writes latest-soak.json under `results`. */
export async function soakOnly(results: string, log: (line: string) => void, meta: Record<string, unknown>): Promise<SoakSection> {
  const seconds = soakSeconds();
  log(`soak: starting embers dev, then ${seconds} s of load`);
  const image = await testImage();
  const embers = await startEmbers({ echo: '{"hello":"embers"}', ocr: JSON.stringify({ image }) });
  try {
    const soak = await soakSection({ embers, seconds, log });
    await mkdir(results, { recursive: true });
    await writeFile(path.join(results, 'latest-soak.json'), `${JSON.stringify({ ...meta, soak }, null, 2)}\n`);
    process.stdout.write(`\n${formatSoak(soak).join('\n')}\n`);
    return soak;
  } finally {
    await embers.stop();
  }
}
