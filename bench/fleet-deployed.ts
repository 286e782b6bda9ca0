// What 1,000 functions deployed and never called cost a fresh `embers dev` (gateway, scheduler,
// node agent and the embedded S3 server in one process): its resident memory and idle CPU
// before and after, and the Redis connections it holds (its own redis-server, so they are
// counted exactly). Deploying and listing them are timed too.
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Redis } from 'ioredis';
import { startLocalRedis, type LocalRedis } from '../platform/local-redis.ts';
import { deployMany, rssOf, templates } from './fleet.ts';
import { launchEmbers, type EmbersProcess } from './servers.ts';
import { sleep } from './stats.ts';

export interface DeployedAtZero {
  functions: number;
  before: ProcessCost;
  after: ProcessCost;
  deploySeconds: number;
  listMs: number;
}

export interface ProcessCost {
  rssBytes: number;
  /** CPU of the process over IDLE_MS, in percent of one core. */
  idleCpuPercent: number;
  redisConnections: number;
}

export const DEPLOYED = 1_000;
/** Quiet time before a measurement (the scheduler drops idle functions from its list, V8 collects). */
const SETTLE_MS = 30_000;
const IDLE_MS = 20_000;
/** The target: gateway and scheduler together. */
export const RSS_TARGET_BYTES = 200 * 2 ** 20;

/** utime + stime of `pid`, in seconds (Linux). */
async function cpuSeconds(pid: number): Promise<number> {
  const fields = (await readFile(`/proc/${pid}/stat`, 'utf8')).split(') ')[1].split(' ');
  return (Number(fields[11]) + Number(fields[12])) / 100;
}

async function cost(pid: number, redis: Redis): Promise<ProcessCost> {
  await sleep(SETTLE_MS);
  const c0 = await cpuSeconds(pid);
  await sleep(IDLE_MS);
  const idleCpuPercent = ((await cpuSeconds(pid)) - c0) / (IDLE_MS / 1000) * 100;
  const clients = Number(/connected_clients:(\d+)/.exec(await redis.info('clients'))?.[1]);
  // Less this measurement's own connection.
  return { rssBytes: await rssOf(pid), idleCpuPercent, redisConnections: clients - 1 };
}

export async function deployedAtZero(log: (line: string) => void): Promise<DeployedAtZero> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'embers-fleet-zero-'));
  let local: LocalRedis | undefined;
  let embers: EmbersProcess | undefined;
  let redis: Redis | undefined;
  try {
    const tpl = await templates();
    local = await startLocalRedis(path.join(dir, 'redis'), { persist: false });
    redis = new Redis(local.url);
    embers = await launchEmbers({ dataDir: path.join(dir, 'data'), env: { EMBERS_REDIS_URL: local.url } });
    log(`fleet: ${DEPLOYED} functions at zero: measuring before`);
    const before = await cost(embers.child.pid, redis);
    const t0 = performance.now();
    await deployMany(embers, tpl, Array.from({ length: DEPLOYED }, (_, i) => [`zero-${String(i).padStart(4, '0')}`, 'tiny']), 'auto');
    const deploySeconds = (performance.now() - t0) / 1000;
    const t1 = performance.now();
    const list = await fetch(`http://127.0.0.1:${embers.port}/v1/functions`, { headers: { authorization: `Bearer ${embers.apiKey}` } });
    await list.arrayBuffer();
    const listMs = performance.now() - t1;
    if (!list.ok) throw new Error(`GET /v1/functions: ${list.status}`);
    log(`fleet: deployed ${DEPLOYED} in ${deploySeconds.toFixed(1)} s; measuring after`);
    const after = await cost(embers.child.pid, redis);
    return { functions: DEPLOYED, before, after, deploySeconds, listMs };
  } finally {
    redis?.disconnect();
    await embers?.stop();
    await local?.stop();
    await rm(dir, { recursive: true, force: true });
  }
}
