// What the design costs before Embers does anything of its own: the bare path (bench/bare-path.ts:
// HTTP server, Redis stream, worker, child process over a pipe, reply by pub/sub, Redis with its
// append-only file on as `embers dev` runs it) against Embers' `echo` and a Hono ping, taking turns
// at c = 1 and 32. The bare path's CPU per request is a floor for `echo`'s, and bare ÷ ping a
// ceiling for echo ÷ ping, on the machine the bench runs on.
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { startChild } from './child.ts';
import { cpuByRole, errorsNote, num, table } from './format.ts';
import type { Target } from './load.ts';
import { cpuPerRequestUs, type Measured } from './result.ts';
import { cleanEnv, ECHO_BODY, echoTarget, ROOT, startEmbers, startNaive } from './servers.ts';
import { windowFromEnv, type Window } from './stats.ts';
import { takeTurnsOf } from './turns.ts';
import { startLocalRedis } from '../platform/local-redis.ts';

export const FLOOR_CONCURRENCIES = [1, 32];

export interface FloorPoint {
  concurrency: number;
  bare: Measured;
  echo: Measured;
  ping: Measured;
}

export interface FloorSection {
  points: FloorPoint[];
  /** At c = 32: CPU µs per request, every process (load generator included). */
  bareCpuUs: number;
  echoCpuUs: number;
  pingCpuUs: number;
  /** bare req/s ÷ ping req/s at c = 32: the most echo ÷ ping can be with this design here. */
  bareVsPing: number;
  seconds: number;
}

export async function floorSection(window: Window, log: (line: string) => void): Promise<FloorSection> {
  const t0 = performance.now();
  const dir = await mkdtemp(path.join(os.tmpdir(), 'embers-floor-'));
  // As `embers dev` runs it: append-only file on.
  const redis = await startLocalRedis(dir, { persist: true });
  const env = cleanEnv({});
  const worker = startChild('bare worker', ['--import', 'tsx', 'bench/bare-path.ts', 'worker', redis.url], { cwd: ROOT, env });
  const gateway = startChild('bare gateway', ['--import', 'tsx', 'bench/bare-path.ts', 'gateway', redis.url], { cwd: ROOT, env });
  try {
    log('floor: starting the bare path, the naive server and embers dev');
    await worker.waitFor(/ready/, 30_000);
    const port = Number((await gateway.waitFor(/listening (\d+)/, 30_000))[1]);
    const [naive, embers] = await Promise.all([startNaive(), startEmbers({ echo: ECHO_BODY })]);
    try {
      const bare: Target = { port, method: 'POST', path: '/run', headers: { 'content-type': 'application/json' }, body: Buffer.from(ECHO_BODY) };
      const echo = echoTarget(embers);
      const ping: Target = { port: naive.port, method: 'GET', path: '/ping' };
      const groups = [redis.pid, worker.pid, gateway.pid, naive.child.pid, embers.child.pid];
      const points: FloorPoint[] = [];
      for (const concurrency of FLOOR_CONCURRENCIES) {
        log(`floor c=${concurrency}: bare, echo, ping, ping, echo, bare`);
        const [b, e, p] = await takeTurnsOf(groups, window, [bare, echo, ping], concurrency);
        points.push({ concurrency, bare: b, echo: e, ping: p });
        log(`floor c=${concurrency}: bare ${b.reqPerSec.toFixed(0)}, echo ${e.reqPerSec.toFixed(0)}, ping ${p.reqPerSec.toFixed(0)} req/s`);
      }
      const at32 = points.find((p) => p.concurrency === 32) ?? points[points.length - 1];
      return {
        points,
        bareCpuUs: cpuPerRequestUs(at32.bare),
        echoCpuUs: cpuPerRequestUs(at32.echo),
        pingCpuUs: cpuPerRequestUs(at32.ping),
        bareVsPing: at32.bare.reqPerSec / at32.ping.reqPerSec,
        seconds: (performance.now() - t0) / 1000,
      };
    } finally {
      await Promise.all([naive.stop(), embers.stop()]);
    }
  } finally {
    await Promise.all([worker.stop(), gateway.stop()]);
    await redis.stop();
    await rm(dir, { recursive: true, force: true });
  }
}

export function formatFloor(s: FloorSection): string[] {
  return [
    'The design\'s floor: the bare path (HTTP, a Redis stream, a worker, a child process over a pipe, the reply by pub/sub; nothing else) against `echo` and a Hono ping, taking turns bare, echo, ping, ping, echo, bare',
    table(
      ['conc', 'side', 'req/s', 'p50', 'p99', 'CPU µs/req'],
      s.points.flatMap((p) =>
        (['bare', 'echo', 'ping'] as const).map((side) => [String(p.concurrency), side, num(p[side].reqPerSec, 0), num(p[side].latencyMs.p50, 2), num(p[side].latencyMs.p99, 2), num(cpuPerRequestUs(p[side]), 0)]),
      ),
    ),
    ...s.points.flatMap((p) => (['bare', 'echo', 'ping'] as const).map((side) => `  c=${p.concurrency} ${side}: ${cpuByRole(p[side])}`)),
    ...s.points.flatMap((p) => [...errorsNote('bare', p.bare), ...errorsNote('echo', p.echo)]),
    `  at c = 32: the bare path costs ${num(s.bareCpuUs, 0)} µs of CPU a request (every process, load generator included), echo ${num(s.echoCpuUs, 0)}, ping ${num(s.pingCpuUs, 0)}; bare ÷ ping = ${num(s.bareVsPing, 3)} bounds echo ÷ ping for this design here`,
  ];
}

/** `BENCH_ONLY=floor`: the section alone (latest-floor.json). */
export async function floorOnly(results: string, log: (line: string) => void, meta: Record<string, unknown>): Promise<FloorSection> {
  const floor = await floorSection(windowFromEnv(), log);
  await mkdir(results, { recursive: true });
  await writeFile(path.join(results, 'latest-floor.json'), `${JSON.stringify({ ...meta, floor }, null, 2)}\n`);
  process.stdout.write(`\n${formatFloor(floor).join('\n')}\n`);
  return floor;
}
