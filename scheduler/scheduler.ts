// The scheduler: while it holds the lease, it watches each function's queue and replicas,
// decides replicas per function (scaler.ts), places them on live nodes (placement.ts), and
// publishes the placement that node agents reconcile toward.
import { Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import { BatchStore } from '../core/batches.ts';
import { BucketRegistry, TenantStores } from '../core/buckets.ts';
import { type Manifest, type NodeRecord, type PlacementRecord, type ScaleRecord } from '../core/contracts.ts';
import { DEFAULT_MAX_JSON_DEPTH } from '../core/json-depth.ts';
import { lastTakenAt } from '../core/live-queue.ts';
import type { Logger } from '../core/log.ts';
import { sampleGauges } from '../core/series.ts';
import { Registry } from '../core/registry.ts';
import { baseKey } from '../core/names.ts';
import type { ObjectStore } from '../core/s3.ts';
import { Sealer } from '../core/sealed.ts';
import { BatchFeeder } from './batch-feeder.ts';
import { expectedIdleMs, IDLE_TIMES_KEPT } from './keep-alive.ts';
import { LeaderLease } from './leader.ts';
import { rescueOrphans } from './orphans.ts';
import { place, type Placement } from './placement.ts';
import { busySlots, reclaim, type FunctionView, type Reclaim } from './reclaim.ts';
import { decide, initialScalerState, keepAliveEndsAt, type ScalerSettings, type ScalerState } from './scaler.ts';
import { Watchlist } from './watchlist.ts';
import { UsageExporter } from './usage-exporter.ts';
import { RolloutDriver } from './rollouts.ts';
import { DEFAULT_ROLLOUT_THRESHOLDS, type RolloutThresholds } from './rollout-judge.ts';
import { batchQueueKey, batchQueueName, keys, liveStream, QUEUE_PREFIX, WEBHOOK_QUEUE } from '../core/keys.ts';
import { BudgetAlerts } from './budget-alerts.ts';

/** What placement assumes a replica holds until one of its version has been measured. */
const UNMEASURED_FOOTPRINT = 256 * 2 ** 20;

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
  /** EMBERS_SECRETS_KEY: opens tenants' registered bucket credentials (batch inputs there). */
  secretsKey?: string;
  /** EMBERS_BUCKET_ALLOW_PRIVATE. @default false */
  bucketAllowPrivate?: boolean;
  /** Bounds of automatic rollouts (EMBERS_ROLLOUT_*). @default DEFAULT_ROLLOUT_THRESHOLDS */
  rollouts?: RolloutThresholds;
  /** The usage export's pace (EMBERS_USAGE_EXPORT_*). @default { intervalMs: 5000, batchRecords: 20000 } */
  usageExport?: { intervalMs: number; batchRecords: number };
}

export class Scheduler {
  private readonly lease: LeaderLease;
  private readonly registry: Registry;
  private readonly queues = new Map<string, Queue>();
  private readonly states = new Map<string, ScalerState>();
  /** Slots each function's replicas held at the last tick (busySlots): what others hold bounds each function's capacity. */
  private lastBusy: Record<string, number> = {};
  private timer?: NodeJS.Timeout;
  /** Dead replicas whose requests were handed over and are not claimed yet. */
  private readonly rescued = new Set<string>();
  private readonly watchlist: Watchlist;
  /** Reads batch inputs in tenants' registered buckets. */
  private readonly inputs: TenantStores;
  private running: Promise<void> | null = null;
  private readonly log: Logger;
  readonly feeder: BatchFeeder;
  private readonly batches: BatchStore;
  private readonly rollouts: RolloutDriver;
  private readonly budgetAlerts: BudgetAlerts;
  /** Raw usage records to S3, while this scheduler leads. */
  readonly usageExporter: UsageExporter;

  constructor(private readonly o: SchedulerOptions) {
    this.lease = new LeaderLease(o.redis, o.id, Math.max(3_000, o.tickMs * 6));
    this.registry = new Registry(o.redis, o.store);
    this.watchlist = new Watchlist(o.redis);
    this.inputs = new TenantStores(o.store, new BucketRegistry(o.redis, o.secretsKey ? new Sealer(o.secretsKey, 'buckets') : null), o.bucketAllowPrivate ?? false);
    this.batches = new BatchStore(o.redis);
    this.log = o.log.child({ component: 'scheduler', scheduler: o.id });
    this.budgetAlerts = new BudgetAlerts({ redis: o.redis, webhooks: () => this.queue(WEBHOOK_QUEUE), log: this.log });
    this.rollouts = new RolloutDriver({ redis: o.redis, registry: this.registry, thresholds: o.rollouts ?? DEFAULT_ROLLOUT_THRESHOLDS, log: this.log });
    this.usageExporter = new UsageExporter({ redis: o.redis, store: o.store, log: o.log, ...(o.usageExport ?? { intervalMs: 5_000, batchRecords: 20_000 }) });
    this.feeder = new BatchFeeder({
      redis: o.redis,
      store: o.store,
      inputs: this.inputs,
      registry: this.registry,
      log: o.log,
      maxOutstanding: o.batchMaxOutstanding ?? 256,
      maxJsonDepth: o.maxJsonDepth ?? DEFAULT_MAX_JSON_DEPTH,
      // Batch lines count as load like any other queued job: decide at once rather than at the next tick.
      wake: (fn) => {
        this.watchlist.add(fn);
        void this.tick();
      },
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
    this.usageExporter.sync(leading);
    if (!leading) {
      if (wasLeader) this.log.warn('lost the scheduler lease');
      return;
    }
    if (!wasLeader) {
      this.log.info('leading the scheduler');
      this.states.clear();
      await this.watchlist.seedAll();
    }
    // Before this pass reads the manifests: a version promoted or rolled back is placed in it.
    await this.rollouts.pass();
    // Its own failure (Redis away) must not stop placement; the next pass judges again.
    await this.budgetAlerts.pass().catch((err: Error) => this.log.warn({ err: err.message }, 'budget alerts failed'));
    const now = Date.now();
    // Live requests (waiting or running: their stream's length) and batch lines are both load:
    // batch lines counted by line (a chunk job holds many), or by job where a batch's record says less.
    const linesOut = await this.batches.linesOut();
    for (const fn of linesOut.keys()) this.watchlist.add(fn);
    const [names, nodes] = await Promise.all([this.watchlist.names(), this.liveNodes()]);
    const found = await this.manifestsOf(names);
    // Deleted (or being deleted: out of the index) since: nothing left to decide for them.
    const deleted = names.filter((_, i) => !found[i]);
    for (const fn of deleted) await this.unwatch(fn, true);
    const manifests = found.filter((m): m is Manifest => m !== null);
    const totalSlots = nodes.reduce((a, n) => a + n.slots, 0);
    const totalMemory = nodes.reduce((a, n) => a + (n.memoryBytes ?? Infinity), 0);
    const previous = await this.readPlacement();

    // Observe every function in one round trip per kind of read.
    const pipe = this.o.redis.pipeline();
    for (const m of manifests) pipe.smembers(keys.replicas(m.name));
    const replicaIds = ((await pipe.exec()) ?? []).map(([, ids]) => ids as string[]);
    const counts = await this.load(manifests, linesOut);
    const replicas = await Promise.all(replicaIds.map((ids, i) => this.liveReplicas(manifests[i].name, ids, manifests[i].version)));
    // Requests held by replicas that died with their machine go back to the queue now.
    const liveNodeIds = new Set(nodes.map((n) => n.id));
    await Promise.all(manifests.filter((_, i) => counts[i].inFlight > 0).map((m) => this.rescue(m.name, liveNodeIds)));

    await this.recallIdleTimes(manifests.map((m) => m.name).filter((fn) => !this.states.has(fn)));
    const footprints = await this.footprints(manifests);
    const footprint = (fn: string) => footprints.get(fn) ?? UNMEASURED_FOOTPRINT;
    const learned: Record<string, string> = {};
    const records: Record<string, ScaleRecord> = {};
    const views: FunctionView[] = [];
    const before = new Map<string, number>();
    manifests.forEach((m, i) => {
      const { inFlight, lastTakenAt } = counts[i];
      const prevState = this.states.get(m.name) ?? initialScalerState();
      before.set(m.name, prevState.desired);
      // Slots bound replicas running requests; an idle function's replicas are bounded by memory (reclaim, placement).
      const others = Object.entries(this.lastBusy).filter(([fn]) => fn !== m.name).reduce((a, [, n]) => a + n, 0);
      // Slots bound starting replicas, never the ones a function has.
      const capacity = inFlight > 0 ? Math.max(prevState.desired, totalSlots - others) : Infinity;
      const d = decide(prevState, { now, inFlight, lastTakenAt, ready: replicas[i].ready, capacity }, m.scaling, this.o.settings);
      this.states.set(m.name, d.state);
      if (d.state.idleMs !== prevState.idleMs) learned[m.name] = JSON.stringify(d.state.idleMs);
      const expectedIn = expectedIdleMs(d.state.idleMs);
      const lastActiveAt = d.state.lastActiveAt;
      views.push({ fn: m.name, desired: d.desired, wanted: d.wanted, minReplicas: m.scaling.minReplicas, inFlight, lastActiveAt, footprint: footprint(m.name), ...(lastActiveAt !== null && expectedIn !== undefined ? { expectedAt: lastActiveAt + expectedIn } : {}) });
      records[m.name] = { desired: d.desired, inFlight, ready: replicas[i].ready, reason: d.reason, at: new Date(now).toISOString() };
    });
    // No function waits on another's idle replica: room for work with no replica is reclaimed.
    const { desired, moves } = reclaim(views, { slots: totalSlots, memoryBytes: totalMemory }, now);
    this.applyReclaim(views, desired, moves, records, now);
    let committed = 0;
    for (const v of views) {
      const [fn, n] = [v.fn, desired[v.fn]];
      records[fn].desired = n;
      committed += busySlots(v, n);
      if (n !== before.get(fn)) this.log.info({ fn, from: before.get(fn), to: n, inFlight: records[fn].inFlight, reason: records[fn].reason }, 'scaling');
    }
    this.lastBusy = Object.fromEntries(views.map((v) => [v.fn, busySlots(v, desired[v.fn])]));
    // Nothing to do for these until a request or a deploy names them again (keys.active).
    for (const [i, m] of manifests.entries()) {
      const ends = keepAliveEndsAt(this.states.get(m.name)!, m.scaling, this.o.settings);
      if (desired[m.name] === 0 && counts[i].inFlight === 0 && replicas[i].live === 0 && m.scaling.minReplicas === 0 && (ends === null || now >= ends)) await this.unwatch(m.name, false);
    }

    const runsModels = new Set(manifests.filter((m) => Object.keys(m.models).length > 0).map((m) => m.name));
    const working = new Set(manifests.filter((_, i) => counts[i].inFlight > 0).map((m) => m.name));
    const placement = place(desired, nodes, Object.fromEntries(Object.entries(previous).map(([fn, r]) => [fn, r.nodes])) as Placement, { runsModels, working, footprint });
    for (const [fn, r] of Object.entries(records)) {
      const placed = Object.values(placement[fn] ?? {}).reduce((a, n) => a + n, 0);
      if (placed < r.desired) r.reason += `; ${placed} placed: the nodes have no spare ${runsModels.has(fn) ? 'cores, memory or slots' : working.has(fn) ? 'memory or slots' : 'memory'} for more`;
    }
    const versions = Object.fromEntries(manifests.map((m) => [m.name, m.version]));
    const next: Record<string, string> = {};
    for (const [fn, perNode] of Object.entries(placement)) next[fn] = JSON.stringify({ version: versions[fn], nodes: perNode } satisfies PlacementRecord);
    const changed = JSON.stringify(next) !== JSON.stringify(Object.fromEntries(Object.entries(previous).map(([fn, r]) => [fn, JSON.stringify(r)])));
    // Scale records of functions no longer watched stay as their last decision (`functions show`).
    const write = this.o.redis.multi().del(keys.placement);
    if (Object.keys(next).length) write.hset(keys.placement, next);
    if (manifests.length) write.hset(keys.desired, Object.fromEntries(Object.entries(records).map(([fn, r]) => [fn, JSON.stringify(r)])));
    if (deleted.length) write.hdel(keys.desired, ...deleted).hdel(keys.idleTimes, ...deleted);
    if (Object.keys(learned).length) write.hset(keys.idleTimes, learned);
    await write.exec();
    await sampleGauges(this.o.redis, manifests.map((m, i) => ({ fn: m.name, depth: counts[i].inFlight, ready: replicas[i].ready })), now);
    if (changed) await this.o.redis.publish(keys.registryChannel, JSON.stringify({ type: 'placement' }));
    if (committed > totalSlots) this.log.warn({ committed, totalSlots }, 'more replicas with work wanted than the nodes have slots');
  }

  /**
   * Brings the scale states and reasons of the functions reclaim changed in line with it: one
   * that gave up its replica stays at zero until it has work; one given room counts a scale-up.
   */
  private applyReclaim(views: FunctionView[], desired: Record<string, number>, moves: Reclaim['moves'], records: Record<string, ScaleRecord>, now: number): void {
    for (const { from, to } of moves) this.log.info({ fn: from, for: to }, 'reclaiming an idle replica for a function with work waiting');
    const roomFor = new Set(moves.map((m) => m.to));
    for (const v of views) {
      const n = desired[v.fn];
      if (n === v.desired) continue;
      const s = this.states.get(v.fn)!;
      // Shown to each function's tenant: neither names the other function.
      if (n < v.desired) {
        this.states.set(v.fn, { ...s, desired: n, ...(n === 0 ? { reclaimed: true } : {}) });
        records[v.fn].reason = 'reclaimed: it held no work, and a function with work waiting needed its room';
      } else {
        this.states.set(v.fn, { ...s, desired: n, lastScaleUpAt: now });
        records[v.fn].reason = roomFor.has(v.fn) ? 'work waiting and no room: an idle replica was reclaimed for it' : 'work waiting with no replica: start one';
      }
    }
  }

  /** How many functions a pass looks at now. */
  get watching(): number {
    return this.watchlist.size;
  }

  /** Looks at `fn` on the next pass (a gateway woke it for a request). */
  watch(fn: string): void {
    this.watchlist.add(fn);
  }

  /** Stops looking at `fn`: its learned idle times stay (unless it was deleted), the rest goes. */
  private async unwatch(fn: string, deleted: boolean): Promise<void> {
    await this.watchlist.drop(fn);
    const s = this.states.get(fn);
    if (deleted || !s) this.states.delete(fn);
    else this.states.set(fn, { ...s, samples: [] });
  }

  /** Starts the scale state of functions this scheduler has not seen with the idle times learned before (by it or another leader). */
  private async recallIdleTimes(fns: string[]): Promise<void> {
    if (fns.length === 0) return;
    const raw = await this.o.redis.hmget(keys.idleTimes, ...fns);
    fns.forEach((fn, i) => {
      let idleMs: number[] = [];
      try {
        const parsed = JSON.parse(raw[i] ?? '[]') as unknown;
        if (Array.isArray(parsed)) idleMs = parsed.filter((v): v is number => typeof v === 'number' && Number.isFinite(v) && v >= 0).slice(-IDLE_TIMES_KEPT);
      } catch {
        // Not JSON: learned again from scratch.
      }
      this.states.set(fn, { ...initialScalerState(), idleMs });
    });
  }

  /** Each function's measured footprint (bytes) on its active version, where one was measured. */
  private async footprints(manifests: Manifest[]): Promise<Map<string, number>> {
    const pipe = this.o.redis.pipeline();
    for (const m of manifests) pipe.hget(keys.footprints(m.name), m.version);
    const res = (await pipe.exec()) ?? [];
    const out = new Map<string, number>();
    manifests.forEach((m, i) => {
      const bytes = Number(res[i]?.[1]);
      if (bytes > 0) out.set(m.name, bytes);
    });
    return out;
  }

  /** The manifest each key serves (Registry.active), or null for one no longer deployed (out of the index). */
  private async manifestsOf(names: string[]): Promise<(Manifest | null)[]> {
    const pipe = this.o.redis.pipeline();
    for (const n of names) pipe.sismember(keys.functionIndex, baseKey(n));
    const indexed = ((await pipe.exec()) ?? []).map(([, v]) => v === 1);
    return Promise.all(names.map((n, i) => (indexed[i] ? this.registry.active(n) : null)));
  }

  /**
   * Load per function: its live stream's length (waiting + running) and its batch lines, counted
   * by line (a chunk job holds many) or by job where the batches' records say less. Read from the
   * batch queue's keys directly: no BullMQ object per function watched.
   */
  private async load(manifests: Manifest[], linesOut: Map<string, number>): Promise<{ inFlight: number; lastTakenAt: number | null | undefined }[]> {
    const pipe = this.o.redis.pipeline();
    for (const m of manifests) {
      const fn = m.name;
      pipe.xlen(liveStream(fn)).llen(batchQueueKey(fn, 'wait')).llen(batchQueueKey(fn, 'active')).zcard(batchQueueKey(fn, 'prioritized')).zcard(batchQueueKey(fn, 'delayed')).xinfo('GROUPS', liveStream(fn));
    }
    const res = (await pipe.exec()) ?? [];
    return manifests.map((m, i) => {
      const [live, ...batch] = res.slice(i * 6, i * 6 + 5).map(([, v]) => Number(v) || 0);
      const [err, groups] = res[i * 6 + 5] ?? [null, null];
      // A stream not made yet has taken nothing (null); another error leaves it unknown (undefined).
      const taken = err ? (/no such key/i.test(String(err)) ? null : undefined) : lastTakenAt(groups);
      return { inFlight: live + Math.max(linesOut.get(m.name) ?? 0, batch.reduce((a, n) => a + n, 0)), lastTakenAt: taken };
    });
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

  private async rescue(fn: string, liveNodes: ReadonlySet<string>): Promise<void> {
    for (const o of await rescueOrphans(this.o.redis, fn, liveNodes).catch(() => [])) {
      // Handed over again on each pass until another replica claims them: said once.
      if (o.handedOver && !this.rescued.has(o.consumer)) this.log.warn({ fn, replica: o.consumer, requests: o.handedOver }, 'handed over the live requests of a replica that is gone (its node stopped answering)');
      if (o.removed) this.rescued.delete(o.consumer);
      else this.rescued.add(o.consumer);
    }
  }

  /**
   * Replicas of `fn` with a record (live) and those ready on its active version. Ids whose record
   * expired (a replica that died with its node) leave the function's set, so they neither count
   * nor keep the function watched.
   */
  private async liveReplicas(fn: string, ids: string[], version: string): Promise<{ live: number; ready: number }> {
    if (ids.length === 0) return { live: 0, ready: 0 };
    const records = await this.o.redis.mget(ids.map(keys.replica));
    const gone = ids.filter((_, i) => records[i] === null);
    if (gone.length) await this.o.redis.srem(keys.replicas(fn), ...gone);
    const live = records.filter((r): r is string => r !== null).map((r) => JSON.parse(r) as { state: string; version: string });
    return { live: live.length, ready: live.filter((r) => r.state === 'ready' && r.version === version).length };
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
    await this.usageExporter.close();
    await this.lease.release().catch(() => {});
    await Promise.all([...this.queues.values()].map((q) => q.close()));
    this.inputs.close();
  }
}
