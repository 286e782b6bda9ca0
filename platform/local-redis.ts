// A redis-server child process for `embers dev` and the tests: loopback only, on a free port.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdir, readFile, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { createRedis } from '../core/redis.ts';
import { freePort } from './ports.ts';

export interface LocalRedis {
  url: string;
  port: number;
  dir: string;
  /** Its watchdog's pid, which leads the process group redis-server runs in. */
  pid: number;
  stop(): Promise<void>;
}

export class MissingDependencyError extends Error {
  override name = 'MissingDependencyError';
}

/**
 * Runs redis-server ("$@") until it exits, or until this shell's stdin, a pipe from its owner,
 * reaches its end: when the owner closes it (LocalRedis.stop) or dies in any way (SIGKILL, a
 * signal it does not handle, which runs no 'exit' handler), then redis-server gets SIGTERM.
 * redis-server's own stdin is /dev/null; the pipe is read by a background subshell (fd 3: an
 * asynchronous list's stdin would be /dev/null), which is killed when redis-server exits first.
 */
const WATCHDOG = 'exec 3<&0; "$@" </dev/null 3<&- & p=$!; (read line <&3; kill $p 2>/dev/null) & w=$!; exec 3<&-; wait $p; s=$?; kill $w 2>/dev/null; exit $s';

/** Another running Embers has its Redis on this data dir. */
export class DataDirInUseError extends Error {
  override name = 'DataDirInUseError';
}

/** Where a running redis-server's port is written, in its data dir. */
const PORT_FILE = 'port';

/**
 * What listens on the port, told apart by asking for its dir: 'ours', the redis-server running
 * in `dir` (compared by device and inode, however spelled); 'silent', something that took the
 * connection and said nothing within `timeoutMs` (ioredis would wait for ever); else 'none'
 * (refused, not Redis, or a Redis of another dir).
 */
async function whoListens(port: number, dir: string, timeoutMs: number): Promise<'ours' | 'silent' | 'none'> {
  const probe = createRedis(`redis://127.0.0.1:${port}`, { lazyConnect: true, retryStrategy: () => null, maxRetriesPerRequest: 0, enableReadyCheck: false, connectTimeout: timeoutMs });
  probe.on('error', () => {});
  let timer: NodeJS.Timeout | undefined;
  const silent = new Promise<'silent'>((resolve) => (timer = setTimeout(() => resolve('silent'), timeoutMs)));
  const asked = probe
    .connect()
    .then(() => probe.config('GET', 'dir'))
    .then(
      async (r) => ((await sameDir((r as string[])[1], dir)) ? 'ours' : 'none'),
      () => 'none' as const,
    );
  try {
    return await Promise.race([asked, silent]);
  } finally {
    clearTimeout(timer);
    probe.disconnect();
  }
}

/** The same directory, however spelled (symlinks, case-insensitive volumes, bind mounts). */
async function sameDir(a: string | undefined, b: string): Promise<boolean> {
  if (!a) return false;
  const [x, y] = await Promise.all([stat(a).catch(() => null), stat(b).catch(() => null)]);
  return x !== null && y !== null && x.dev === y.dev && x.ino === y.ino;
}

/**
 * Throws DataDirInUseError if the redis-server last started on `dir` still answers there: two
 * on one append-only file would corrupt it. Its identity is checked by asking it for its dir,
 * so a port file left by one that stopped, or a port since taken by anything else, is ignored.
 * Best effort: two starts at the same moment both pass (the port is written once Redis is up).
 */
async function refuseIfInUse(dir: string): Promise<void> {
  const file = path.join(dir, PORT_FILE);
  const port = Number((await readFile(file, 'utf8').catch(() => '')).trim());
  if (!Number.isInteger(port) || port <= 0 || port > 65535) return;
  const who = await whoListens(port, dir, 2000);
  if (who === 'silent') {
    throw new DataDirInUseError(`port ${port}, where the last Redis on ${dir} listened (${file}), takes connections but did not answer in 2 s; if no Embers runs on this data dir, delete that file`);
  }
  if (who === 'ours') {
    throw new DataDirInUseError(`another Embers is using ${dir} (its Redis answers on port ${port}): stop it, or give this one its own EMBERS_DATA_DIR`);
  }
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

/** redis-server stopped at start because something else took its port first. */
class PortTakenError extends Error {}

/**
 * Starts redis-server with its data in `dir`; `persist` turns the append-only file on. On a port
 * of its own choosing, one taken between choosing and binding (another process's free port too)
 * is retried on another.
 */
export async function startLocalRedis(dir: string, opts: { persist?: boolean; port?: number; choosePort?: () => Promise<number> } = {}): Promise<LocalRedis> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await startOnce(dir, opts.persist, opts.port ?? (await (opts.choosePort ?? freePort)()));
    } catch (err) {
      if (!(err instanceof PortTakenError) || opts.port !== undefined || attempt >= 3) throw err;
    }
  }
}

async function startOnce(dir: string, persist: boolean | undefined, port: number): Promise<LocalRedis> {
  const bin = findRedisServer();
  await mkdir(dir, { recursive: true });
  await refuseIfInUse(dir);
  // Answers reach gateways through pub/sub; Redis's default drops a subscriber that falls 32 MB
  // behind (or 8 MB for a minute), and one gateway's subscriber carries every answer it waits for
  // (each up to EMBERS_MAX_ANSWER_BYTES).
  const args = ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--save', '', '--appendonly', persist ? 'yes' : 'no', '--protected-mode', 'yes', '--client-output-buffer-limit', 'pubsub 256mb 64mb 60'];
  // Through a watchdog shell, in a process group of its own (see WATCHDOG). Ctrl-C in a terminal
  // signals the whole foreground group, and a redis-server that stopped then left the platform
  // stopping against a dead Redis: ioredis retries for ever, and `embers dev` hung until a second
  // Ctrl-C. Now the owner stops it last (`stop`), and it stops when the owner dies, however.
  const child: ChildProcess = spawn('sh', ['-c', WATCHDOG, 'sh', bin, ...args], { stdio: ['pipe', 'pipe', 'pipe'], detached: true });
  child.stdin!.on('error', () => {});
  let output = '';
  child.stdout?.on('data', (d) => (output = (output + d).slice(-4000)));
  child.stderr?.on('data', (d) => (output = (output + d).slice(-4000)));
  const url = `redis://127.0.0.1:${port}`;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  /** Closing the watchdog's stdin stops redis-server (SIGTERM: a clean shutdown); the shell exits with it. */
  const stop = async () => {
    child.stdin!.end();
    await exited;
  };
  const deadline = Date.now() + 10_000;
  for (;;) {
    if (child.exitCode !== null || child.signalCode !== null) {
      const message = `redis-server exited at start:\n${output}`;
      throw /Address already in use/i.test(output) ? new PortTakenError(message) : new Error(message);
    }
    // Ours, not whatever else took the port first (ours then exits: "Address already in use").
    if ((await whoListens(port, dir, 1000)) === 'ours') break;
    if (Date.now() > deadline) {
      // The watchdog's process group: the shell, its reader and redis-server.
      try {
        process.kill(-child.pid!, 'SIGKILL');
      } catch {
        // Gone already.
      }
      throw new Error(`redis-server did not answer on ${url} within 10 s:\n${output}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  try {
    await writeFile(path.join(dir, PORT_FILE), `${port}\n`);
  } catch (err) {
    await stop();
    throw err;
  }
  return { url, port, dir, pid: child.pid!, stop };
}

