// A redis-server child process for `embers dev` and the tests: loopback only, on a free port.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdir } from 'node:fs/promises';
import { createRedis } from '../../core/redis.ts';
import { freePort } from './ports.ts';

export interface LocalRedis {
  url: string;
  port: number;
  dir: string;
  stop(): Promise<void>;
}

export class MissingDependencyError extends Error {
  override name = 'MissingDependencyError';
}

export function findRedisServer(): string {
  const found = spawnSync('redis-server', ['--version'], { encoding: 'utf8' });
  if (found.error || found.status !== 0) {
    throw new MissingDependencyError(
      'redis-server was not found on PATH. Install it (Debian/Ubuntu: `sudo apt-get install redis-server`; macOS: `brew install redis`) or point Embers at a running Redis with EMBERS_REDIS_URL=redis://host:6379.',
    );
  }
  return 'redis-server';
}

/** Starts redis-server with its data in `dir`; `persist` turns the append-only file on. */
export async function startLocalRedis(dir: string, opts: { persist?: boolean; port?: number } = {}): Promise<LocalRedis> {
  const bin = findRedisServer();
  await mkdir(dir, { recursive: true });
  const port = opts.port ?? (await freePort());
  const args = ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--save', '', '--appendonly', opts.persist ? 'yes' : 'no', '--protected-mode', 'yes'];
  // In a process group of its own: Ctrl-C in a terminal signals the whole foreground group, and
  // a redis-server that stopped then would leave the platform stopping against a dead Redis
  // (ioredis retries forever; `embers dev` hung until a second Ctrl-C). It is stopped last
  // instead (`stop`), and killed when this process exits.
  const child: ChildProcess = spawn(bin, args, { stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  let output = '';
  child.stdout?.on('data', (d) => (output = (output + d).slice(-4000)));
  child.stderr?.on('data', (d) => (output = (output + d).slice(-4000)));
  const url = `redis://127.0.0.1:${port}`;
  // Never leave a redis-server behind when this process dies.
  const killOnExit = () => child.kill('SIGKILL');
  process.once('exit', killOnExit);
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  void exited.then(() => process.off('exit', killOnExit));
  const deadline = Date.now() + 10_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`redis-server exited at start:\n${output}`);
    const probe = createRedis(url, { lazyConnect: true, retryStrategy: () => null, maxRetriesPerRequest: 0 });
    probe.on('error', () => {});
    const ok = await probe.connect().then(() => probe.ping()).then(() => true, () => false);
    probe.disconnect();
    if (ok) break;
    if (Date.now() > deadline) {
      child.kill('SIGKILL');
      throw new Error(`redis-server did not answer on ${url} within 10 s:\n${output}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  return {
    url,
    port,
    dir,
    async stop() {
      if (child.exitCode === null) child.kill('SIGTERM');
      await exited;
    },
  };
}
