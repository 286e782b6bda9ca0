// The node agent: runs this machine's replicas. It advertises its slots (and GPUs), follows the
// placement the leading scheduler publishes, restarts replicas that die (with backoff), and
// drains replicas that are no longer wanted. Replicas are child processes, so a crash never
// takes the agent or another function down. Every agent is also a scheduler candidate.
import { fork, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Redis } from 'ioredis';
import { EXIT_BROKE_CHANNEL, EXIT_REPLACE_ME, type NodeRecord, type PlacementRecord, type PlatformEvent } from '../core/contracts.ts';
import type { Logger } from '../core/log.ts';
import { createRedis } from '../core/redis.ts';
import { redisEnv, type RedisTarget } from '../core/redis-target.ts';
import type { ObjectStore } from '../core/s3.ts';
import { discoverGpus, type GpuInfo } from '../native/gpu.ts';
import { buildRuntime } from './runtime-build.ts';
import { probeSandbox, type SandboxSupport } from '../runtime/replica/sandbox.ts';
import { sweepCgroups } from '../runtime/replica/cgroup-sweep.ts';
import { Scheduler, type SchedulerOptions } from './scheduler.ts';
import { waitAtMost } from '../core/settle.ts';
import { keys } from '../core/keys.ts';
import { ExitedRequests } from './exited-requests.ts';
import { RestartPenalty } from './restart-penalty.ts';
import type { Assignment, ToAgent } from '../runtime/replica/agent-messages.ts';
import { createAgentMetrics, exitReason } from './agent-metrics.ts';
import { serveMetrics, type MetricsServer } from './metrics-server.ts';

const REPLICA_SOURCE = fileURLToPath(new URL('../runtime/replica/main.ts', import.meta.url));
const TSX = import.meta.resolve('tsx');
const STOP_GRACE_MS = 15_000;
/** Longest close() waits for each Redis-bound step (the scheduler's pass, a reconcile, the node record). */
const CLOSE_WAIT_MS = 10_000;
/**
 * V8 flags of replica processes: request and answer bodies (megabytes of image or tensor data)
 * pass through them on their way to and from the user-code process, short-lived; a 128 MB
 * starting heap lets them die young instead of setting off full collections every few requests.
 * Without the memory reducer, which would collect over and over while idle to shrink that heap.
 * A heap bound of its own: a replica runs outside its user code's cgroup, and a bug there must
 * end that replica, not the node.
 */
const REPLICA_V8_FLAGS = ['--initial-heap-size=128', '--no-memory-reducer', '--max-old-space-size=1024'];
/** How often the agent removes the cgroups of user-code processes whose replicas died without removing them. */
const CGROUP_SWEEP_MS = 60_000;

export interface AgentOptions {
  redisTarget: RedisTarget;
  store: ObjectStore;
  /** Node-level cache shared by this agent's replicas. */
  cacheDir: string;
  log: Logger;
  /** Replica slots offered. @default 2 × CPU cores */
  slots?: number;
  /** Memory its replicas may hold together (bytes). @default 80 % of the machine's */
  memoryBytes?: number;
  heartbeatMs?: number;
  /** A node whose record is this old is gone: its replicas are placed elsewhere. @default 10000 */
  nodeTtlMs?: number;
  scheduler: Pick<SchedulerOptions, 'tickMs' | 'settings' | 'batchMaxOutstanding' | 'maxJsonDepth' | 'secretsKey' | 'bucketAllowPrivate' | 'rollouts' | 'usageExport'>;
  /** Extra environment for replicas (S3 endpoint, thread budget, …). */
  replicaEnv?: Record<string, string>;
  /** Execution providers replicas are asked to use: GPUs are handed out only for cuda/tensorrt. */
  providers?: string[];
  /** Cores a replica running models keeps busy under load on CPU (its instances × threads). @default 0 */
  modelReplicaCores?: number;
  /** The replicas' lock time (EMBERS_JOB_LOCK_MS): how long an exited replica's consumer is tried for removal from its live group. @default 30000 */
  lockMs?: number;
  /** EMBERS_JOB_RETENTION_S: how long an async job this agent answers keeps its result. @default 86400 */
  jobRetentionS?: number;
  /** EMBERS_ALLOW_UNSANDBOXED: run every tenant's code on a node that cannot sandbox it. @default false */
  allowUnsandboxed?: boolean;
  /** The first wait before replacing a replica whose user code failed while serving (RestartPenalty). @default 1000 */
  replaceWaitMs?: number;
  /** EMBERS_SANDBOX. @default auto */
  sandbox?: 'auto' | 'off';
  /** Where to serve Prometheus's /metrics (EMBERS_METRICS_HOST, EMBERS_METRICS_PORT; port 0: nowhere). @default nowhere */
  metrics?: { host: string; port: number };
}

interface ReplicaProcess {
  id: string;
  fn: string;
  version: string;
  child: ChildProcess;
  state: 'starting' | 'ready' | 'draining';
  stopping: boolean;
  spawnedAt: number;
  exited: Promise<number | null>;
}

export class NodeAgent {
  readonly id: string;
  readonly scheduler: Scheduler;
  private readonly redis: Redis;
  private readonly sub: Redis;
  private readonly replicas = new Map<string, ReplicaProcess>();
  private readonly backoff = new Map<string, { failures: number; until: number }>();
  /** Functions whose user code fails while serving wait longer each time to be replaced. */
  private readonly penalty: RestartPenalty;
  private gpus: GpuInfo[] = [];
  private sandbox?: SandboxSupport;
  /** Prebuilt replica entry (plain JS), or null to run the TypeScript source through tsx. */
  private replicaMain: string | null = null;
  private standby: { child: ChildProcess; booted: boolean } | null = null;
  private spawned = 0;
  private timers: NodeJS.Timeout[] = [];
  private reconciling: Promise<void> | null = null;
  private again = false;
  private closed = false;
  private readonly slots: number;
  private readonly nodeTtlMs: number;
  private readonly log: Logger;
  private readonly handOvers: ExitedRequests;
  private readonly metrics = createAgentMetrics();
  private metricsServer?: MetricsServer;

  constructor(private readonly o: AgentOptions) {
    this.id = `node-${os.hostname()}-${randomUUID().slice(0, 6)}`;
    this.penalty = new RestartPenalty({ baseMs: o.replaceWaitMs });
    this.redis = createRedis(o.redisTarget);
    this.sub = createRedis(o.redisTarget);
    this.slots = o.slots ?? 2 * os.availableParallelism();
    this.nodeTtlMs = o.nodeTtlMs ?? 10_000;
    this.log = o.log.child({ component: 'agent', node: this.id });
    this.scheduler = new Scheduler({ redis: this.redis, store: o.store, id: this.id, log: o.log, ...o.scheduler });
    this.handOvers = new ExitedRequests({ redis: this.redis, log: this.log, by: this.id, lockMs: o.lockMs, jobRetentionS: o.jobRetentionS });
  }

  async start(): Promise<void> {
    // First: a port already taken stops the start before this node takes any work.
    if (this.o.metrics && this.o.metrics.port > 0) {
      this.metricsServer = await serveMetrics({ ...this.o.metrics, log: this.log, render: () => this.metrics.render(() => this.redis.ping()) });
      this.log.info({ url: this.metricsServer.url }, 'serving metrics');
    }
    await this.begin().catch(async (err: unknown) => {
      await this.metricsServer?.close();
      throw err;
    });
  }

  private async begin(): Promise<void> {
    try {
      this.replicaMain = (await buildRuntime(path.join(this.o.cacheDir, 'runtime'))).main;
    } catch (err) {
      this.log.warn({ err: (err as Error).message }, 'could not prebuild the replica runtime; replicas run from TypeScript source');
    }
    this.sandbox = probeSandbox(this.o.sandbox);
    if (!this.sandbox.isolates) this.log.warn({ missing: this.sandbox.missing }, this.o.allowUnsandboxed ? 'user code runs WITHOUT a sandbox on this node (EMBERS_ALLOW_UNSANDBOXED=1)' : 'this node cannot sandbox user code: it runs only the default tenant\'s functions (EMBERS_ALLOW_UNSANDBOXED=1 runs every tenant\'s)');
    else if (this.sandbox.missing.length) this.log.warn({ missing: this.sandbox.missing }, 'user code is sandboxed, with limits missing');
    const cgroup = this.sandbox.cgroup;
    if (cgroup) {
      this.sweepCgroups(cgroup);
      this.timers.push(setInterval(() => this.sweepCgroups(cgroup), CGROUP_SWEEP_MS));
    }
    this.gpus = await discoverGpus();
    if (this.gpus.length) this.log.info({ gpus: this.gpus }, 'GPUs found');
    await this.advertise();
    this.sub.on('message', (_channel: string, message: string) => {
      const event = JSON.parse(message) as PlatformEvent;
      const type = event.type;
      if (type === 'wake') this.scheduler.watch(event.name);
      if (type === 'wake' || type === 'batch') void this.scheduler.tick();
      else void this.reconcile();
    });
    await this.sub.subscribe(keys.registryChannel);
    const beat = this.o.heartbeatMs ?? 1_000;
    this.timers.push(setInterval(() => void this.advertise().catch(() => {}), beat));
    this.timers.push(setInterval(() => void this.reconcile(), Math.max(500, beat)));
    this.scheduler.start();
    this.prepareStandby();
    await this.reconcile();
  }

  private sweepCgroups(kind: 'v1' | 'v2'): void {
    const removed = sweepCgroups(kind);
    if (removed) this.log.info({ removed }, 'removed the cgroups of user-code processes gone without removing them');
  }

  /** Where this node serves Prometheus's /metrics, if it does. */
  get metricsUrl(): string | undefined {
    return this.metricsServer?.url;
  }

  /** Replica processes on this node, for tests and the dev banner. */
  running(): { id: string; fn: string; version: string; state: string; pid?: number }[] {
    return [...this.replicas.values()].map((r) => ({ id: r.id, fn: r.fn, version: r.version, state: r.state, pid: r.child.pid }));
  }

  /** Replicas run their models on this node's GPUs (it has some, and a GPU provider is asked for). */
  private get onGpus(): boolean {
    return this.gpus.length > 0 && (this.o.providers ?? []).some((p) => p !== 'cpu');
  }

  private async advertise(): Promise<void> {
    const record: NodeRecord = {
      id: this.id,
      host: os.hostname(),
      pid: process.pid,
      slots: this.slots,
      memoryBytes: this.o.memoryBytes ?? Math.floor(os.totalmem() * 0.8),
      cores: os.availableParallelism(),
      modelReplicaCores: this.onGpus ? 0 : (this.o.modelReplicaCores ?? 0),
      gpus: this.gpus,
      replicas: this.replicas.size,
      startedAt: new Date().toISOString(),
      sandbox: this.sandbox && { ...this.sandbox, unsandboxedAllowed: this.o.allowUnsandboxed ?? false },
    };
    // A node counts as gone when its record expires; long enough to ride out a Redis blip.
    await this.redis.multi().set(keys.node(this.id), JSON.stringify(record), 'PX', this.nodeTtlMs).sadd(keys.nodes, this.id).exec();
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
        await this.pass().catch((err) => this.log.warn({ err: (err as Error).message }, 'reconcile failed'));
      } while (this.again && !this.closed);
      this.reconciling = null;
    })();
    return this.reconciling;
  }

  private async pass(): Promise<void> {
    if (this.closed) return;
    const raw = await this.redis.hgetall(keys.placement);
    const want = new Map<string, { version: string; count: number }>();
    for (const [fn, r] of Object.entries(raw)) {
      const rec = JSON.parse(r) as PlacementRecord;
      const count = rec.nodes[this.id] ?? 0;
      if (count > 0) want.set(fn, { version: rec.version, count });
    }
    for (const r of this.replicas.values()) {
      if (r.stopping) continue;
      const w = want.get(r.fn);
      if (!w || w.version !== r.version) {
        this.log.info({ replica: r.id, next: w?.version ?? null }, w ? 'replacing replica with the new version' : 'replica no longer placed here: draining');
        void this.stopReplica(r);
      }
    }
    for (const [fn, w] of want) {
      const live = [...this.replicas.values()].filter((r) => r.fn === fn && r.version === w.version && !r.stopping);
      // Scale down: drain the youngest first (the oldest are warmest).
      for (const r of live.sort((a, b) => b.spawnedAt - a.spawnedAt).slice(0, Math.max(0, live.length - w.count))) {
        this.log.info({ replica: r.id }, 'scaling down: draining replica');
        void this.stopReplica(r);
      }
      const b = this.backoff.get(`${fn}@${w.version}`);
      if ((b && Date.now() < b.until) || this.penalty.waiting(fn)) continue;
      for (let i = live.length; i < w.count; i++) this.spawn(fn, w.version);
    }
  }

  /** Forks a runtime process; in standby it loads everything and waits for an assignment. */
  private forkRuntime(extraEnv: Record<string, string>): ChildProcess {
    return fork(this.replicaMain ?? REPLICA_SOURCE, [], {
      execArgv: [...REPLICA_V8_FLAGS, ...(this.replicaMain ? [] : ['--import', TSX])],
      env: { ...process.env, ...this.o.replicaEnv, EMBERS_NODE_ID: this.id, ...redisEnv(this.o.redisTarget), EMBERS_CACHE_DIR: this.o.cacheDir, ...(this.sandbox ? { EMBERS_SANDBOX_SUPPORT: JSON.stringify(this.sandbox) } : {}), ...extraEnv },
      // In the agent's process group and session (one scheduling group with it: Linux's autogroup
      // shares CPU between sessions). A terminal's Ctrl-C reaches them too; a replica with an
      // agent ignores SIGINT and waits for the agent's SIGTERM (runtime/replica/main.ts).
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
  }

  /** Keeps one booted runtime process waiting, so a cold start skips process and module start-up. */
  private prepareStandby(): void {
    if (this.closed || this.standby) return;
    const child = this.forkRuntime({ EMBERS_REPLICA_STANDBY: '1' });
    const entry = { child, booted: false };
    this.standby = entry;
    child.on('message', (m: ToAgent) => {
      if (m?.type === 'standby') entry.booted = true;
    });
    child.once('exit', () => {
      if (this.standby !== entry) return;
      this.standby = null;
      if (!this.closed) setTimeout(() => this.prepareStandby(), 1_000).unref();
    });
  }

  private spawn(fn: string, version: string): void {
    const id = `${fn}-${version}-${randomUUID().slice(0, 6)}`;
    const gpu = this.onGpus ? this.gpus[this.spawned % this.gpus.length] : undefined;
    this.spawned++;
    const spawnedAt = Date.now();
    const perReplica: Record<string, string> = gpu ? { CUDA_VISIBLE_DEVICES: String(gpu.index) } : {};
    let child: ChildProcess;
    const standby = this.standby;
    if (standby && standby.child.connected) {
      this.standby = null;
      child = standby.child;
      child.removeAllListeners('message');
      // The next standby boots as soon as this one is taken: back to back under a run of cold
      // starts, one boot at a time (a boot takes a core for about a second).
      const assign = () => {
        child.send({ type: 'assign', id, fn, version, spawnedAt, env: perReplica } satisfies Assignment);
        this.prepareStandby();
      };
      // One still booting is nearer ready than a fresh fork, which would compete with it for CPU.
      if (standby.booted) assign();
      else child.on('message', (m: ToAgent) => m?.type === 'standby' && assign());
    } else {
      child = this.forkRuntime({ ...perReplica, EMBERS_REPLICA_ID: id, EMBERS_REPLICA_FUNCTION: fn, EMBERS_REPLICA_VERSION: version, EMBERS_REPLICA_SPAWNED_AT: String(spawnedAt) });
    }
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    const r: ReplicaProcess = { id, fn, version, child, state: 'starting', stopping: false, spawnedAt, exited };
    this.replicas.set(id, r);
    this.metrics.started(fn);
    void this.redis.hset(keys.replicaNodes, id, this.id).catch(() => {});
    this.log.info({ replica: id, pid: child.pid, gpu: gpu?.index }, 'replica spawned');
    child.on('message', (m: ToAgent) => {
      if (m?.type === 'counters') this.metrics.reported(id, fn, m.counters);
      if (m?.type === 'ready') {
        r.state = 'ready';
        this.backoff.delete(`${fn}@${version}`);
        this.prepareStandby();
      }
    });
    void exited.then((code) => {
      this.metrics.exited(id, fn, exitReason({ stopping: r.stopping || this.closed, code, everReady: r.state === 'ready' }));
      this.replicas.delete(id);
      this.prepareStandby();
      void this.redis.multi().del(keys.replica(id)).srem(keys.replicas(fn), id).hdel(keys.replicaNodes, id).exec().catch(() => {});
      this.handOvers.settle(r.fn, r.id);
      if (r.stopping || this.closed) return;
      if (code === EXIT_REPLACE_ME || code === EXIT_BROKE_CHANNEL) {
        // Its user code failed while serving: the function, whatever its version, waits longer each time.
        const delay = this.penalty.record(fn);
        this.log.warn({ replica: id, retryInMs: delay, brokeChannel: code === EXIT_BROKE_CHANNEL }, 'replica asked to be replaced: its user code failed while serving');
        setTimeout(() => void this.reconcile(), delay).unref();
      } else {
        const key = `${fn}@${version}`;
        const b = this.backoff.get(key) ?? { failures: 0, until: 0 };
        b.failures++;
        const delay = Math.min(30_000, 500 * 2 ** (b.failures - 1));
        b.until = Date.now() + delay;
        this.backoff.set(key, b);
        // Its live requests were handed over (above); its batch lines come back when their locks expire.
        this.log.warn({ replica: id, code, retryInMs: delay }, 'replica exited unexpectedly; restarting');
        setTimeout(() => void this.reconcile(), delay).unref();
      }
      void this.reconcile();
    });
  }

  private async stopReplica(r: ReplicaProcess): Promise<void> {
    if (!r.stopping) {
      r.stopping = true;
      r.state = 'draining';
      r.child.kill('SIGTERM');
      const timer = setTimeout(() => r.child.kill('SIGKILL'), STOP_GRACE_MS);
      void r.exited.then(() => clearTimeout(timer));
    }
    await r.exited;
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const t of this.timers) clearInterval(t);
    // A Redis call that never returns (after a Redis outage and restart) must not hold the stop,
    // nor keep the replicas and the standby running. Going on disconnects Redis at the end, which
    // fails whatever still waits on it.
    await this.bounded(this.scheduler.close(), 'the scheduler to stop');
    await this.bounded(this.reconciling, 'a reconcile pass to end');
    this.standby?.child.kill('SIGTERM');
    this.standby = null;
    await Promise.all([...this.replicas.values()].map((r) => this.stopReplica(r)));
    await this.bounded(this.redis.multi().del(keys.node(this.id)).srem(keys.nodes, this.id).exec(), 'the node record to be removed');
    await this.bounded(this.handOvers.close(), 'exited replicas\' requests to be handed over or answered');
    await this.metricsServer?.close();
    this.sub.disconnect();
    this.redis.disconnect();
  }

  /** Waits for `p` (settled either way) up to CLOSE_WAIT_MS; past that, says so and goes on. */
  private async bounded(p: Promise<unknown> | null | undefined, what: string): Promise<void> {
    await waitAtMost(p, CLOSE_WAIT_MS, this.log, `${what} (closing the node agent)`);
  }
}
