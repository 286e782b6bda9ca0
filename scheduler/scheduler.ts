// The scheduler: while it holds the lease, it watches each function's queue and replicas,
// decides replicas per function (scaler.ts), places them on live nodes (placement.ts), and
// publishes the placement that node agents reconcile toward.
import { Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import { batchQueueName, keys, QUEUE_PREFIX, type NodeRecord, type PlacementRecord, type ScaleRecord } from '../core/contracts.ts';
import { liveStream } from '../core/live-queue.ts';
import type { Logger } from '../core/log.ts';
import { Registry } from '../core/registry.ts';
import type { ObjectStore } from '../core/s3.ts';
import { BatchStore } from '../core/batches.ts';
import { DEFAULT_MAX_JSON_DEPTH } from '../core/json-depth.ts';
import { BatchFeeder } from './batch-feeder.ts';
import { LeaderLease } from './leader.ts';
import { place, type Placement } from './placement.ts';
import { decide, initialScalerState, type ScalerSettings, type ScalerState } from './scaler.ts';

export interface SchedulerOptions {
  redis: Redis;
  store: ObjectStore;
  id: string;
  log: Logger;
  tickMs: number;
  settings: ScalerSettings;
  /** Lines of one batch kept in its function's queue at once. @default 256 */
  batchMaxOutstanding?: number;
  /** Most arrays and objects a batch line's input may nest (EMBERS_MAX_JSON_DEPTH). @default 128 */
  maxJsonDepth?: number;
}

export class Scheduler {
  private readonly lease: LeaderLease;
  private readonly registry: Registry;
  private readonly queues = new Map<string, Queue>();
  private readonly states = new Map<string, ScalerState>();
  /** Last tick's decisions: what other functions hold bounds each function's capacity. */
  private lastDesired: Record<string, number> = {};
  private timer?: NodeJS.Timeout;
  private running: Promise<void> | null = null;
  private readonly log: Logger;
  readonly feeder: BatchFeeder;
  private readonly batches: BatchStore;

  constructor(private readonly o: SchedulerOptions) {
    this.lease = new LeaderLease(o.redis, o.id, Math.max(3_000, o.tickMs * 6));
    this.registry = new Registry(o.redis, o.store);
    this.batches = new BatchStore(o.redis);
    this.log = o.log.child({ component: 'scheduler', scheduler: o.id });
    this.feeder = new BatchFeeder({
      redis: o.redis,
      store: o.store,
      registry: this.registry,
      log: o.log,
      maxOutstanding: o.batchMaxOutstanding ?? 256,
      maxJsonDepth: o.maxJsonDepth ?? DEFAULT_MAX_JSON_DEPTH,
      // Batch lines count as load like any other queued job: decide at once rather than at the next tick.
      wake: () => void this.tick(),
      queue: (fn) => this.queue(batchQueueName(fn)),
    });
  }

  start(): void {
    this.timer = setInterval(() => void this.tick(), this.o.tickMs);
    void this.tick();
  }

  get isLeader(): boolean {
    return this.lease.isLeader;
  }

  tick(): Promise<void> {
    if (this.running) return this.running;
    this.running = this.pass()
      .catch((err) => this.log.warn({ err: (err as Error).message }, 'scheduler pass failed'))
      .finally(() => (this.running = null));
    return this.running;
  }

  private async pass(): Promise<void> {
    const wasLeader = this.lease.isLeader;
    const leading = await this.lease.tick();
    await this.feeder.sync(leading);
    if (!leading) {
      if (wasLeader) this.log.warn('lost the scheduler lease');
      return;
    }
    if (!wasLeader) {
      this.log.info('leading the scheduler');
      this.states.clear();
    }
    const now = Date.now();
    const [manifests, nodes] = await Promise.all([this.registry.activeManifests(), this.liveNodes()]);
    const totalSlots = nodes.reduce((a, n) => a + n.slots, 0);
    const previous = await this.readPlacement();

    // Observe every function in one round trip per kind of read.
    const pipe = this.o.redis.pipeline();
    for (const m of manifests) pipe.smembers(keys.replicas(m.name));
    const replicaIds = ((await pipe.exec()) ?? []).map(([, ids]) => ids as string[]);
    // Live requests (waiting or running: their stream's length) and batch lines are both load:
    // batch lines counted by line (a chunk job holds many), or by job where a batch's record says less.
    const linesOut = await this.batches.linesOut();
    const counts = await Promise.all(
      manifests.map(async (m) => {
        const [live, batch] = await Promise.all([this.o.redis.xlen(liveStream(m.name)), this.queue(batchQueueName(m.name)).getJobCounts('wait', 'active', 'prioritized', 'delayed')]);
        return live + Math.max(linesOut.get(m.name) ?? 0, Object.values(batch).reduce((a, n) => a + (n ?? 0), 0));
      }),
    );
    const ready = await Promise.all(replicaIds.map((ids, i) => this.readyCount(ids, manifests[i].version)));

    const desired: Record<string, number> = {};
    const records: Record<string, ScaleRecord> = {};
    let committed = 0;
    manifests.forEach((m, i) => {
      const inFlight = counts[i];
      const prevState = this.states.get(m.name) ?? initialScalerState();
      const others = Object.entries(this.lastDesired).filter(([fn]) => fn !== m.name).reduce((a, [, n]) => a + n, 0);
      const capacity = Math.max(0, totalSlots - others);
      const d = decide(prevState, { now, inFlight, ready: ready[i], capacity }, m.scaling, this.o.settings);
      this.states.set(m.name, d.state);
      if (d.desired !== prevState.desired) this.log.info({ fn: m.name, from: prevState.desired, to: d.desired, inFlight, reason: d.reason }, 'scaling');
      desired[m.name] = d.desired;
      committed += d.desired;
      records[m.name] = { desired: d.desired, inFlight, ready: ready[i], reason: d.reason, at: new Date(now).toISOString() };
    });
    this.lastDesired = desired;
    for (const fn of this.states.keys()) if (!(fn in desired)) this.states.delete(fn);

    const runsModels = new Set(manifests.filter((m) => Object.keys(m.models).length > 0).map((m) => m.name));
    const placement = place(desired, nodes, Object.fromEntries(Object.entries(previous).map(([fn, r]) => [fn, r.nodes])) as Placement, runsModels);
    for (const [fn, r] of Object.entries(records)) {
      const placed = Object.values(placement[fn] ?? {}).reduce((a, n) => a + n, 0);
      if (placed < r.desired) r.reason += `; ${placed} placed: the nodes have no spare ${runsModels.has(fn) ? 'cores or slots' : 'slots'} for more`;
    }
    const versions = Object.fromEntries(manifests.map((m) => [m.name, m.version]));
    const next: Record<string, string> = {};
    for (const [fn, perNode] of Object.entries(placement)) next[fn] = JSON.stringify({ version: versions[fn], nodes: perNode } satisfies PlacementRecord);
    const changed = JSON.stringify(next) !== JSON.stringify(Object.fromEntries(Object.entries(previous).map(([fn, r]) => [fn, JSON.stringify(r)])));
    const write = this.o.redis.multi().del(keys.placement, keys.desired);
    if (Object.keys(next).length) write.hset(keys.placement, next);
    if (manifests.length) write.hset(keys.desired, Object.fromEntries(Object.entries(records).map(([fn, r]) => [fn, JSON.stringify(r)])));
    await write.exec();
    if (changed) await this.o.redis.publish(keys.registryChannel, JSON.stringify({ type: 'placement' }));
    if (committed > totalSlots) this.log.warn({ committed, totalSlots }, 'more replicas wanted than the nodes have slots');
  }

  private queue(name: string): Queue {
    let q = this.queues.get(name);
    if (!q) {
      q = new Queue(name, { connection: this.o.redis, prefix: QUEUE_PREFIX });
      q.on('error', () => {});
      this.queues.set(name, q);
    }
    return q;
  }

  private async readyCount(ids: string[], version: string): Promise<number> {
    if (ids.length === 0) return 0;
    const records = await this.o.redis.mget(ids.map(keys.replica));
    return records
      .map((r) => (r ? (JSON.parse(r) as { state: string; version: string }) : null))
      .filter((r) => r?.state === 'ready' && r.version === version).length;
  }

  private async liveNodes(): Promise<NodeRecord[]> {
    const ids = await this.o.redis.smembers(keys.nodes);
    if (ids.length === 0) return [];
    const records = await this.o.redis.mget(ids.map(keys.node));
    const gone = ids.filter((_, i) => records[i] === null);
    if (gone.length) await this.o.redis.srem(keys.nodes, ...gone);
    return records.filter((r): r is string => r !== null).map((r) => JSON.parse(r) as NodeRecord);
  }

  private async readPlacement(): Promise<Record<string, PlacementRecord>> {
    const raw = await this.o.redis.hgetall(keys.placement);
    return Object.fromEntries(Object.entries(raw).map(([fn, r]) => [fn, JSON.parse(r) as PlacementRecord]));
  }

  async close(): Promise<void> {
    clearInterval(this.timer);
    await this.running;
    await this.feeder.close();
    await this.lease.release().catch(() => {});
    await Promise.all([...this.queues.values()].map((q) => q.close()));
  }
}
