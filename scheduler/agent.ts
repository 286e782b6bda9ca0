// The node agent: runs this machine's replicas. For now one replica per active function
// version; restarts replicas that die (with backoff) and stops those of deleted or replaced
// versions. Replicas are child processes so a crash never takes the agent or another function down.
import { fork, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import type { Redis } from 'ioredis';
import { keys, type Manifest } from '../core/contracts.ts';
import type { Logger } from '../core/log.ts';
import { createRedis } from '../core/redis.ts';
import { Registry } from '../core/registry.ts';
import type { ObjectStore } from '../core/s3.ts';

const REPLICA_MAIN = fileURLToPath(new URL('../runtime/main.ts', import.meta.url));
const TSX = import.meta.resolve('tsx');
const RECONCILE_MS = 2_000;
const STOP_GRACE_MS = 15_000;

export interface AgentOptions {
  redisUrl: string;
  store: ObjectStore;
  /** Node-level cache shared by this agent's replicas. */
  cacheDir: string;
  log: Logger;
  /** Extra environment for replicas (S3 endpoint, thread budget, …). */
  replicaEnv?: Record<string, string>;
}

interface ReplicaProcess {
  id: string;
  fn: string;
  version: string;
  child: ChildProcess;
  stopping: boolean;
  exited: Promise<number | null>;
}

interface Backoff {
  failures: number;
  until: number;
}

export class NodeAgent {
  private readonly redis: Redis;
  private readonly sub: Redis;
  private readonly registry: Registry;
  private readonly replicas = new Map<string, ReplicaProcess>();
  private readonly backoff = new Map<string, Backoff>();
  private timer?: NodeJS.Timeout;
  private reconciling: Promise<void> | null = null;
  private again = false;
  private closed = false;
  private readonly log: Logger;

  constructor(private readonly o: AgentOptions) {
    this.redis = createRedis(o.redisUrl);
    this.sub = createRedis(o.redisUrl);
    this.registry = new Registry(this.redis, o.store);
    this.log = o.log.child({ component: 'agent' });
  }

  async start(): Promise<void> {
    this.sub.on('message', () => void this.reconcile());
    await this.sub.subscribe(keys.registryChannel);
    await this.reconcile();
    this.timer = setInterval(() => void this.reconcile(), RECONCILE_MS);
  }

  /** Replica processes by function, for tests and the dev banner. */
  running(): { id: string; fn: string; version: string; pid?: number }[] {
    return [...this.replicas.values()].map((r) => ({ id: r.id, fn: r.fn, version: r.version, pid: r.child.pid }));
  }

  /** Coalesces concurrent triggers into one pass plus, if needed, one more. */
  reconcile(): Promise<void> {
    if (this.reconciling) {
      this.again = true;
      return this.reconciling;
    }
    this.reconciling = (async () => {
      do {
        this.again = false;
        await this.pass().catch((err) => this.log.error({ err }, 'reconcile failed'));
      } while (this.again && !this.closed);
      this.reconciling = null;
    })();
    return this.reconciling;
  }

  private async pass(): Promise<void> {
    if (this.closed) return;
    const desired = new Map((await this.registry.activeManifests()).map((m) => [m.name, m]));
    for (const [fn, r] of this.replicas) {
      const want = desired.get(fn);
      if (!want || want.version !== r.version) {
        this.log.info({ fn, version: r.version, next: want?.version ?? null }, want ? 'replacing replica with new version' : 'function deleted: stopping replica');
        void this.stopReplica(r);
      }
    }
    for (const [fn, m] of desired) {
      if (this.replicas.has(fn)) continue;
      const b = this.backoff.get(`${fn}@${m.version}`);
      if (b && Date.now() < b.until) continue;
      this.spawn(m);
    }
  }

  private spawn(m: Manifest): void {
    const id = `${m.name}-${m.version}-${randomUUID().slice(0, 6)}`;
    const child = fork(REPLICA_MAIN, [], {
      execArgv: ['--import', TSX],
      env: {
        ...process.env,
        ...this.o.replicaEnv,
        EMBERS_REPLICA_ID: id,
        EMBERS_REPLICA_FUNCTION: m.name,
        EMBERS_REPLICA_VERSION: m.version,
        EMBERS_REPLICA_SPAWNED_AT: String(Date.now()),
        EMBERS_REDIS_URL: this.o.redisUrl,
        EMBERS_CACHE_DIR: this.o.cacheDir,
      },
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    const r: ReplicaProcess = { id, fn: m.name, version: m.version, child, stopping: false, exited };
    this.replicas.set(m.name, r);
    this.log.info({ replica: id, pid: child.pid }, 'replica spawned');
    child.on('message', () => {});
    void exited.then((code) => {
      if (this.replicas.get(m.name) === r) this.replicas.delete(m.name);
      if (r.stopping || this.closed) return;
      const key = `${m.name}@${m.version}`;
      const b = this.backoff.get(key) ?? { failures: 0, until: 0 };
      b.failures++;
      const delay = Math.min(30_000, 500 * 2 ** (b.failures - 1));
      b.until = Date.now() + delay;
      this.backoff.set(key, b);
      this.log.warn({ replica: id, code, retryInMs: delay }, 'replica exited unexpectedly; restarting');
      // Its heartbeat record is stale now; its held jobs come back when their locks expire.
      void this.redis.multi().del(keys.replica(id)).srem(keys.replicas(m.name), id).exec().catch(() => {});
      setTimeout(() => void this.reconcile(), delay).unref();
    });
  }

  private async stopReplica(r: ReplicaProcess): Promise<void> {
    if (r.stopping) return r.exited.then(() => {});
    r.stopping = true;
    if (this.replicas.get(r.fn) === r) this.replicas.delete(r.fn);
    r.child.kill('SIGTERM');
    const timer = setTimeout(() => r.child.kill('SIGKILL'), STOP_GRACE_MS);
    await r.exited;
    clearTimeout(timer);
  }

  async close(): Promise<void> {
    this.closed = true;
    clearInterval(this.timer);
    await this.reconciling;
    await Promise.all([...this.replicas.values()].map((r) => this.stopReplica(r)));
    this.sub.disconnect();
    this.redis.disconnect();
  }
}
