// A redis-server child process for `embers dev` and the tests: loopback only, on a free port.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { mkdir, readFile } from 'node:fs/promises';
import path from 'node:path';
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

/** Another running Embers has its Redis on this data dir. */
export class DataDirInUseError extends MissingDependencyError {
  override name = 'DataDirInUseError';
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
  const pidFile = path.join(dir, 'redis.pid');
  await stopLeftBehind(pidFile);
  const port = opts.port ?? (await freePort());
  const args = ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--pidfile', pidFile, '--save', '', '--appendonly', opts.persist ? 'yes' : 'no', '--protected-mode', 'yes'];
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

/** A process's name and parent from /proc (Linux); undefined when it is gone or there is no /proc. */
function procInfo(pid: number): { comm: string; ppid: number } | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const comm = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
    return { comm, ppid: Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]) };
  } catch {
    return undefined;
  }
}

/**
 * A redis-server still running on this data dir (its pid file says which) was left behind by an
 * `embers dev` that was killed outright (SIGKILL, a closed terminal): nothing stops it then, and a
 * second one on the same append-only file would corrupt it. It is stopped; one whose parent is
 * still a running Node process belongs to another Embers using this data dir, which is refused.
 */
async function stopLeftBehind(pidFile: string): Promise<void> {
  const pid = Number((await readFile(pidFile, 'utf8').catch(() => '')).trim());
  if (!Number.isInteger(pid) || pid <= 0) return;
  const info = procInfo(pid);
  if (!info || !info.comm.startsWith('redis-server')) return;
  const parent = procInfo(info.ppid);
  // Adopted by init (pid 1) or a subreaper, it is an orphan whatever runs as pid 1.
  if (info.ppid !== 1 && parent?.comm === 'node') {
    throw new DataDirInUseError(`another Embers (pid ${info.ppid}) runs a redis-server (pid ${pid}) on ${path.dirname(pidFile)}: stop it, or give this one its own EMBERS_DATA_DIR`);
  }
  process.kill(pid, 'SIGTERM');
  for (let i = 0; i < 100 && procInfo(pid); i++) await new Promise((r) => setTimeout(r, 50));
  if (procInfo(pid)) process.kill(pid, 'SIGKILL');
}
