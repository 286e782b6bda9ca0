// A real Redis failover group on loopback: a primary, a replica and three Sentinels, each its own
// redis-server process, with a password on the data servers. Sentinel's down-after is 2 s.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { Redis } from 'ioredis';
import { findRedisServer } from '../../platform/local-redis.ts';
import { freePort } from '../../platform/ports.ts';
import { eventually } from './platform.ts';

const GROUP = 'embers';
const PASSWORD = 'sentinel-test-secret';

export interface SentinelGroupUnderTest {
  /** EMBERS_REDIS_* for the platform. */
  env: Record<string, string>;
  /** The data servers' ports (the first starts as primary). */
  servers: number[];
  /** The port the Sentinels name as primary now. */
  primary(): Promise<number>;
  /** SIGKILLs the server on `port`. */
  kill(port: number): void;
  /** Starts the server on `port` again, with its data; the Sentinels make it a replica of the primary. */
  revive(port: number): Promise<void>;
  /** Waits until the Sentinels name a primary other than `port` (the failover), and returns it. */
  failedOverFrom(port: number, timeoutMs?: number): Promise<number>;
  /** Waits until the primary has `n` replicas online. */
  replicasOnline(n: number): Promise<void>;
  stop(): Promise<void>;
}

export async function startSentinelGroup(dir: string): Promise<SentinelGroupUnderTest> {
  const bin = findRedisServer();
  const servers = [await freePort(), await freePort()];
  const sentinels = [await freePort(), await freePort(), await freePort()];
  const procs = new Map<number, ChildProcess>();

  const startServer = async (port: number, replicaOf?: number) => {
    const data = path.join(dir, `redis-${port}`);
    await mkdir(data, { recursive: true });
    const args = ['--port', String(port), '--bind', '127.0.0.1', '--dir', data, '--appendonly', 'yes', '--save', '', '--requirepass', PASSWORD, '--masterauth', PASSWORD];
    if (replicaOf) args.push('--replicaof', '127.0.0.1', String(replicaOf));
    procs.set(port, spawn(bin, args, { stdio: 'ignore' }));
    await eventually(() => ping(port), `redis-server on ${port}`, 10_000);
  };
  const startSentinel = async (port: number) => {
    const conf = path.join(dir, `sentinel-${port}.conf`);
    // Sentinel rewrites its file as it learns the group: one file each, writable.
    await writeFile(
      conf,
      [
        `port ${port}`,
        'bind 127.0.0.1',
        `dir ${dir}`,
        `sentinel monitor ${GROUP} 127.0.0.1 ${servers[0]} 2`,
        `sentinel auth-pass ${GROUP} ${PASSWORD}`,
        `sentinel down-after-milliseconds ${GROUP} 2000`,
        `sentinel failover-timeout ${GROUP} 5000`,
        `sentinel parallel-syncs ${GROUP} 1`,
        '',
      ].join('\n'),
    );
    procs.set(port, spawn(bin, [conf, '--sentinel'], { stdio: 'ignore' }));
    await eventually(() => ping(port, false), `sentinel on ${port}`, 10_000);
  };
  /** `fn` on a short-lived connection to `port`; undefined when it cannot be reached. */
  const on = async <T>(port: number, fn: (c: Redis) => Promise<T>, auth = true): Promise<T | undefined> => {
    const c = new Redis({ port, host: '127.0.0.1', password: auth ? PASSWORD : undefined, lazyConnect: true, retryStrategy: () => null, maxRetriesPerRequest: 0, connectTimeout: 1_000 });
    c.on('error', () => {});
    try {
      await c.connect();
      return await fn(c);
    } catch {
      return undefined;
    } finally {
      c.disconnect();
    }
  };
  const ping = async (port: number, auth = true) => (await on(port, (c) => c.ping(), auth)) === 'PONG';
  const askSentinels = async (): Promise<number | undefined> => {
    for (const port of sentinels) {
      const addr = await on(port, (c) => c.call('SENTINEL', 'get-master-addr-by-name', GROUP) as Promise<string[] | null>, false);
      if (addr) return Number(addr[1]);
    }
    return undefined;
  };

  await startServer(servers[0]);
  await startServer(servers[1], servers[0]);
  for (const port of sentinels) await startSentinel(port);
  const group: SentinelGroupUnderTest = {
    env: { EMBERS_REDIS_SENTINELS: sentinels.map((p) => `127.0.0.1:${p}`).join(','), EMBERS_REDIS_SENTINEL_NAME: GROUP, EMBERS_REDIS_URL: `redis://:${PASSWORD}@${GROUP}` },
    servers,
    primary: async () => (await askSentinels()) ?? 0,
    kill: (port) => procs.get(port)?.kill('SIGKILL'),
    revive: (port) => startServer(port),
    failedOverFrom: (port, timeoutMs = 30_000) => eventually(async () => {
      const now = await askSentinels();
      return now && now !== port ? now : undefined;
    }, `the Sentinels to promote a replica in place of ${port}`, timeoutMs),
    replicasOnline: async (n) => {
      await eventually(async () => {
        const primary = await askSentinels();
        if (!primary) return false;
        const text = (await on(primary, (c) => c.info('replication'))) ?? '';
        return (text.match(/^slave\d+:.*state=online.*$/gm) ?? []).length >= n;
      }, `${n} replica(s) online`, 30_000);
    },
    stop: async () => {
      for (const p of procs.values()) p.kill('SIGKILL');
    },
  };
  // The Sentinels know each other and the replica before anything relies on them.
  await eventually(async () => {
    const master = await on(sentinels[0], (c) => c.call('SENTINEL', 'master', GROUP) as Promise<string[]>, false);
    const field = (k: string) => Number(master?.[master.indexOf(k) + 1]);
    return !!master && field('num-other-sentinels') >= 2 && field('num-slaves') >= 1;
  }, 'the Sentinels to find each other and the replica', 30_000);
  return group;
}
