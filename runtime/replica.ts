// A replica: one process serving one function version, the trusted half of it. It fetches the
// bundle and models, has its user-code process (user-code-process.ts: the tenant's code, in a
// sandbox without the platform's credentials) load them, then consumes the function's two
// queues, live and batch lines, hands each request to the user code and meters and answers
// what comes back. Each queue has its own slots; batch lines yield the models to live requests.
import { rename, stat, writeFile } from 'node:fs/promises';
import { setMaxListeners } from 'node:events';
import os from 'node:os';
import path from 'node:path';
import { Queue, WaitingError, Worker, type Job } from 'bullmq';
import { decodeLiveJob, finishLiveEntries, leaveLiveGroup, readLiveEntries, type LiveEntry, type LiveOutcome } from '../core/live-queue.ts';
import { LiveConsumer } from './live-consumer.ts';
import type { Redis } from 'ioredis';
import { linkPlatformModules } from '../core/bundle-dir.ts';
import { BatchStore, chunkLineJobs, errorLine, outputLine } from '../core/batches.ts';
import { unrunTiming } from './timing.ts';
import { plainName } from '../core/names.ts';
import { evalScript } from '../core/redis.ts';
import { batchQueueName, encodeReply, errorBody, keys, QUEUE_PREFIX, SCAN_NOW, WEBHOOK_QUEUE, type Manifest, type ColdStartPhases, type PlatformEvent, type ReplyHeader, type RunJobData, type BatchChunkData } from '../core/contracts.ts';
import { sinceEnqueued } from '../core/clock.ts';
import { CANCELED_BODY, enqueueWebhook, isTerminal, JobStore } from '../core/jobs.ts';
import { recordUsage, type UsageRecord } from '../core/usage.ts';
import type { Logger } from '../core/log.ts';
import type { ObjectStore } from '../core/s3.ts';
import type { ExecutionProvider } from '../native/session.ts';
import { ModelCache } from './model-cache.ts';
import { binaryAsJson, type BinaryBody } from './result-body.ts';
import type { UserCodeExit, UserCodeProcess } from './user-code-process.ts';
import { StartFailure, type UserStats } from './user-code-messages.ts';

export type ReplicaState = 'starting' | 'ready' | 'draining' | 'failed';

export type ColdStart = ColdStartPhases;

export interface ReplicaOptions {
  id: string;
  manifest: Manifest;
  redis: Redis;
  /** The platform's bucket: the bundle, and models there. */
  store: ObjectStore;
  /** The function's tenant. */
  tenant: string;
  /** The store that reads one of the function's models: the platform's, or its tenant's registered bucket; null: neither. */
  modelStore: (uri: string) => Promise<ObjectStore | null>;
  log: Logger;
  cacheDir: string;
  providers: ExecutionProvider[];
  threads: number;
  /** On CPU, sessions per model that may run at once. @default 1 */
  instances?: number;
  /** On CPU, intra-op threads of an inference that has the replica to itself (0: no such session). */
  wideThreads?: number;
  /** Live requests (sync and async) a replica runs at once. */
  concurrency: number;
  /** Batch lines a replica runs at once, in slots of their own. */
  batchConcurrency: number;
  /** How long after the last live request batch lines may use the models again. */
  batchYieldMs: number;
  heartbeatMs: number;
  lockMs: number;
  /** Id of the node agent that started it. */
  node?: string;
  /** When the node agent spawned this process (ms since epoch), for the spawn phase. */
  spawnedAt?: number;
  /** Bound of the node's model cache (LRU beyond it). */
  modelCacheBytes?: number;
  /** How long a handler may run past its timeout before the replica gives up on it. */
  handlerGraceMs: number;
  /** How long async job results are kept. */
  jobRetentionS: number;
  /** Largest answer (bytes) a handler may give (EMBERS_MAX_ANSWER_BYTES). */
  maxAnswerBytes: number;
  /** Called when a handler will not stop: the process should exit so the agent replaces it. */
  onStuck?: () => void;
  /** The user-code process, booted, waiting for its assignment. */
  userCode: UserCodeProcess;
  /** The GPU the user code's models run on (CUDA_VISIBLE_DEVICES), on GPU nodes. */
  cudaVisibleDevices?: string;
  /** Set when this node may not run the function's code: the start fails in phase "sandbox" with this message. */
  refuse?: string;
  /** The user-code process's memory limit (bytes), reported with the replica. */
  memoryLimitBytes: number;
  /** Called when the user-code process exits on its own (crash or memory): this process should exit so the agent replaces it; `answered`: what it held was answered. */
  onUserCodeExit?: (e: UserCodeExit, answered: boolean) => void;
}

/** Raises a version's footprint to ARGV[2] unless it is higher already. KEYS: footprints hash; ARGV: version, bytes. */
const RAISE_FOOTPRINT = `
local cur = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
if tonumber(ARGV[2]) > cur then redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) end
return 0`;

/** The replica's own record, written on every heartbeat and read by the API and the scheduler. */
export interface ReplicaRecord {
  id: string;
  function: string;
  version: string;
  pid: number;
  host: string;
  /** The node agent that runs it. */
  node?: string;
  state: ReplicaState;
  startedAt: string;
  coldStart?: ColdStart;
  error?: { phase: string; message: string };
  jobs: { active: number; completed: number; failed: number };
  /** Batch lines yielding to live requests: how often, and for how long in all. */
  liveFirst?: { yields: number; heldMs: number };
  /** Garbage collection on the replica's main thread (where handlers run) since it started. */
  gc?: { count: number; ms: number };
  /** Per model: provider, loaded instances, and the batcher's counters. */
  /** `lone`: where a lone request's inferences run; its medians are null (NaN) until measured. */
  models: UserStats['models'];
  /** Memory the user-code process's cgroup uses, and its limit (bytes). */
  memory?: { usedBytes?: number; limitBytes: number };
}

export class Replica {
  private state: ReplicaState = 'starting';
  /** Live requests (sync and async): the function's stream. */
  private live?: LiveConsumer;
  /** Batch lines: the function's BullMQ batch queue. */
  private batchWorker?: Worker<RunJobData | BatchChunkData>;
  /** Batch jobs (chunks and lines) the worker is in now. */
  private batchJobs = 0;
  private batchJobEnded?: () => void;
  /** A batch line running alone here (runAlone): other batch jobs step out of the worker meanwhile. */
  private alone?: string;
  /** Batch jobs leaving the worker for a while (stepOut). */
  private steppingOut = 0;
  /** While set, the batch worker takes one job at a time (isolate). */
  private isolation?: NodeJS.Timeout;
  /** Jobs running now, by lane. */
  private readonly lanes = { live: 0, batch: 0 };
  private heartbeat?: NodeJS.Timeout;
  private coldStart?: ColdStart;
  private error?: ReplicaRecord['error'];
  private readonly jobs = { completed: 0, failed: 0 };
  private readonly startedAt = new Date();
  private readyAt = 0;
  private readonly log: Logger;
  private readonly jobStore: JobStore;
  private readonly batchStore: BatchStore;
  private webhookQueue?: Queue;
  /** The batch queue, to put back the lines of a chunk whose replica died. */
  private batchQueueHandle?: Queue;
  /** Running async jobs, by job id, so DELETE /v1/jobs/:id can abort their handlers. */
  private readonly cancels = new Map<string, AbortController>();
  private cancelSub?: Redis;
  private readonly user: UserCodeProcess;
  /** The user-code process is being stopped (drain, abandon) or is gone. */
  private stopping = false;

  constructor(private readonly o: ReplicaOptions) {
    this.log = o.log.child({ replica: o.id, fn: o.manifest.name, version: o.manifest.version });
    this.jobStore = new JobStore(o.redis, o.jobRetentionS);
    this.batchStore = new BatchStore(o.redis);
    this.user = o.userCode;
    this.user.onAnnounce = (busy) => void o.redis.publish(keys.liveChannel(this.nodeId), `${o.id} ${busy ? 1 : 0}`).catch(() => {});
    this.user.onStuck = (rid) => this.stuck(rid);
    this.user.onExit = (e) => this.userCodeExited(e);
  }

  /** The machine whose cores (or GPUs) this replica shares with the others there. */
  private get nodeId(): string {
    return this.o.node ?? os.hostname();
  }

  record(): ReplicaRecord {
    const stats = this.user.stats();
    return {
      id: this.o.id,
      function: this.o.manifest.name,
      version: this.o.manifest.version,
      pid: process.pid,
      host: os.hostname(),
      node: this.o.node,
      state: this.state,
      startedAt: this.startedAt.toISOString(),
      coldStart: this.coldStart,
      error: this.error,
      jobs: { active: this.lanes.live + this.lanes.batch, ...this.jobs },
      liveFirst: stats?.liveFirst,
      gc: stats?.gc,
      models: stats?.models ?? {},
      memory: { usedBytes: this.user.memoryBytes(), limitBytes: this.o.memoryLimitBytes },
    };
  }

  async start(): Promise<void> {
    const { manifest } = this.o;
    // spawn: from the agent's spawn() to this process running our code.
    const began = this.o.spawnedAt ?? Date.now();
    const spawnMs = Math.max(0, Date.now() - began);
    await this.beat();
    this.heartbeat = setInterval(() => void this.beat().catch((err) => this.log.warn({ err }, 'heartbeat failed')), this.o.heartbeatMs);
    let phase = 'bundle';
    try {
      if (this.o.refuse) {
        phase = 'sandbox';
        throw new Error(this.o.refuse);
      }
      const tBundle = performance.now();
      const bundleFile = await this.fetchBundle();
      const fetchBundleMs = performance.now() - tBundle;

      phase = 'model_fetch';
      const tFetch = performance.now();
      const cache = new ModelCache(path.join(this.o.cacheDir, 'models'), this.o.store, this.o.modelCacheBytes);
      const files = await Promise.all(
        Object.entries(manifest.models).map(async ([name, uri]) => {
          const from = await this.o.modelStore(uri);
          if (!from) throw new Error(`model ${name} (${uri}) cannot be read: its bucket is not registered by the function's tenant`);
          return [name, await cache.fetch(uri, from, this.o.tenant)] as const;
        }),
      );
      const modelFetchMs = files.every(([, f]) => f.hit) ? 0 : performance.now() - tFetch;

      // bundle (its import), model_load, setup and warmup run in the user-code process.
      phase = 'model_load';
      const { bundleMs, modelLoadMs, setupMs, warmupMs } = await this.user.assign(
        {
          replica: this.o.id,
          env: this.o.cudaVisibleDevices !== undefined ? { CUDA_VISIBLE_DEVICES: this.o.cudaVisibleDevices } : {},
          // The tenant's own name for it, not the platform's key (core/names.ts).
          fn: { name: plainName(manifest.name), version: manifest.version, timeoutMs: manifest.timeoutMs, batching: manifest.batching },
          settings: {
            providers: this.o.providers,
            threads: this.o.threads,
            instances: this.o.instances ?? 1,
            wideThreads: this.o.wideThreads ?? 0,
            batchYieldMs: this.o.batchYieldMs,
            handlerGraceMs: this.o.handlerGraceMs,
            maxAnswerBytes: this.o.maxAnswerBytes,
          },
        },
        bundleFile,
        Object.fromEntries(files.map(([name, f]) => [name, { path: f.path, bytes: f.bytes }])),
      );
      this.coldStart = { spawnMs, bundleMs: fetchBundleMs + bundleMs, modelFetchMs, modelLoadMs, setupMs, warmupMs, totalMs: Date.now() - began };
    } catch (err) {
      this.state = 'failed';
      if (err instanceof StartFailure) phase = err.phase;
      this.error = { phase, message: (err as Error).message };
      this.log.error({ err, phase }, 'replica failed to start');
      await this.beat().catch(() => {});
      await this.failWaiting(this.error).catch((e) => this.log.warn({ err: (e as Error).message }, 'could not answer waiting requests'));
      throw err;
    }
    // Listening for cancellations before the first job can arrive (the worker starts fetching at once).
    this.cancelSub = this.o.redis.duplicate();
    this.cancelSub.on('error', () => {});
    const liveChannel = keys.liveChannel(this.nodeId);
    this.cancelSub.on('message', (channel: string, message: string) => {
      const [a, b] = message.split(' ');
      if (channel === liveChannel) {
        if (a !== this.o.id) this.user.peer(a, b === '1');
      } else if (a === manifest.name) {
        if (b === SCAN_NOW) this.live?.scanNow();
        else this.cancels.get(b)?.abort();
      }
    });
    // Cancellations (and hand-overs of live requests), and, for a function with models, the
    // node's other replicas saying when live requests need the cores: only model inferences wait
    // for them (live-first.ts), and every replica hearing every other's would cost each replica
    // CPU in proportion to the node's whole traffic.
    const runsModels = Object.keys(manifest.models).length > 0;
    await this.cancelSub.subscribe(keys.cancelChannel, ...(runsModels ? [liveChannel] : []));
    // Live requests and batch lines each have their own queue and slots: batch lines can never
    // hold the slots a live request needs, however many are queued.
    this.live = new LiveConsumer({
      redis: this.o.redis,
      fn: manifest.name,
      consumer: this.o.id,
      concurrency: this.o.concurrency,
      lockMs: this.o.lockMs,
      process: (entry, data, deliveries) => this.process(liveJobId(manifest.name, entry, data), data, deliveries - 1),
      log: this.log,
    });
    await this.live.start();
    const batchQueue = batchQueueName(manifest.name);
    this.batchWorker = new Worker<RunJobData | BatchChunkData>(batchQueue, (job, token, signal) => this.processBatchJob(job, token, signal), {
      connection: this.o.redis,
      prefix: QUEUE_PREFIX,
      concurrency: this.o.batchConcurrency,
      lockDuration: this.o.lockMs,
      stalledInterval: Math.max(500, Math.floor(this.o.lockMs / 2)),
      // We answer poison jobs ourselves (see process); BullMQ must not fail them silently first.
      maxStalledCount: MAX_CRASHES + 1,
      removeOnComplete: { count: 0 },
      removeOnFail: { count: 100 },
    });
    this.batchWorker.on('error', (err) => this.log.error({ err, queue: batchQueue }, 'queue worker error'));
    this.state = 'ready';
    this.readyAt = Date.now();
    await this.beat();
    await this.announceColdStart();
    this.log.info({ coldStart: this.coldStart }, 'replica ready');
  }

  /** Records the cold start for the API and metrics, and tells gateways this function serves. */
  private async announceColdStart(): Promise<void> {
    const { name, version } = this.o.manifest;
    await this.recordStart(
      { replica: this.o.id, version, at: new Date(this.readyAt).toISOString(), ...this.coldStart! },
      { type: 'replica', name, replica: this.o.id, state: 'ready', coldStart: this.coldStart },
    );
  }

  /** Keeps the last 20 starts (and failures) of the function, and announces this one. */
  private async recordStart(record: object, event: PlatformEvent): Promise<void> {
    const list = keys.coldStarts(this.o.manifest.name);
    await this.o.redis.multi().lpush(list, JSON.stringify(record)).ltrim(list, 0, 19).publish(keys.registryChannel, JSON.stringify(event)).exec();
  }

  /**
   * A replica that cannot start answers the requests waiting for it (503, with the phase and
   * error) unless another replica of the function is serving, so callers do not hang.
   */
  private async failWaiting(error: { phase: string; message: string }): Promise<void> {
    const { name } = this.o.manifest;
    await this.recordStart(
      { replica: this.o.id, version: this.o.manifest.version, at: new Date().toISOString(), error },
      { type: 'replica', name, replica: this.o.id, state: 'failed', error },
    );
    const ids = (await this.o.redis.smembers(keys.replicas(name))).filter((id) => id !== this.o.id);
    const others = ids.length ? await this.o.redis.mget(ids.map(keys.replica)) : [];
    if (others.some((r) => r && (JSON.parse(r) as ReplicaRecord).state === 'ready')) return;
    const failed = (jobId: string, data: RunJobData) => {
      const body = JSON.stringify(errorBody('replica_start_failed', `${plainName(name)} ${this.o.manifest.version} cannot start: ${error.phase} failed: ${error.message}`));
      return this.deliver(jobId, data, { rid: data.rid, status: 503, replica: this.o.id, timing: unrunTiming(sinceEnqueued(data)) }, body, false);
    };
    // Live requests: read them all as this replica, answer, acknowledge.
    for (;;) {
      // A few at a time: an entry may carry megabytes of binary body.
      const entries = await readLiveEntries(this.o.redis, name, this.o.id, 32).catch((): LiveEntry[] => []);
      if (!entries.length) break;
      const finished: { id: string; outcome?: LiveOutcome }[] = [];
      for (const [entry, fields] of entries) {
        const data = decodeLiveJob(fields);
        finished.push({ id: entry, outcome: data ? await failed(liveJobId(name, entry, data), data) : undefined });
      }
      await finishLiveEntries(this.o.redis, name, finished);
    }
    await leaveLiveGroup(this.o.redis, name, this.o.id).catch(() => {});
    const queue = new Queue<RunJobData | BatchChunkData>(batchQueueName(name), { connection: this.o.redis, prefix: QUEUE_PREFIX });
    try {
      for (const job of await queue.getJobs(['wait', 'prioritized'], 0, 999)) {
        if (!job?.data) continue;
        const removed = await job.remove().then(() => true, () => false);
        if (!removed) continue;
        if (!('chunk' in job.data)) await failed(job.id!, job.data);
        else for (const { data } of chunkLineJobs(job.data)) await failed(data.rid, data);
      }
    } finally {
      await queue.close();
    }
  }

  private stuck(rid: string): void {
    if (this.state === 'draining') return;
    this.log.error({ rid, graceMs: this.o.handlerGraceMs }, 'handler still running after its timeout and grace: replacing this replica');
    this.state = 'draining';
    void this.beat().catch(() => {});
    this.o.onStuck?.();
  }

  /** Stops at once without waiting for held jobs (their locks expire and they run elsewhere). */
  async abandon(): Promise<void> {
    clearInterval(this.heartbeat);
    this.cancelSub?.disconnect();
    this.stopping = true;
    await this.user.kill();
    await this.live?.abandon();
    await this.batchWorker?.close(true).catch(() => {});
    await this.o.redis.multi().del(keys.replica(this.o.id)).srem(keys.replicas(this.o.manifest.name), this.o.id).exec().catch(() => {});
  }

  /** Takes no more jobs, finishes those it holds, then releases its models. */
  async drain(): Promise<void> {
    if (this.state === 'draining') return;
    this.state = 'draining';
    await this.beat().catch(() => {});
    await Promise.all([this.live?.drain(), this.batchWorker?.close()]);
    clearInterval(this.heartbeat);
    this.cancelSub?.disconnect();
    await this.webhookQueue?.close();
    await this.batchQueueHandle?.close();
    this.stopping = true;
    await this.user.kill();
    await this.o.redis.multi().del(keys.replica(this.o.id)).srem(keys.replicas(this.o.manifest.name), this.o.id).exec().catch(() => {});
  }

  private async beat(): Promise<void> {
    // A handler that holds the user code's thread (a loop that never yields) lets no timer run
    // there, its timeout included: judged from here, by how long the process has been silent.
    const silent = this.user.silentMs();
    if (this.state === 'ready' && this.lanes.live + this.lanes.batch > 0 && silent > this.o.manifest.timeoutMs + this.o.handlerGraceMs + this.o.heartbeatMs) this.stuck(`(the user code has not answered for ${Math.round(silent)} ms)`);
    const ttl = this.o.heartbeatMs * 3;
    await this.o.redis
      .multi()
      .set(keys.replica(this.o.id), JSON.stringify(this.record()), 'PX', ttl)
      .sadd(keys.replicas(this.o.manifest.name), this.o.id)
      .exec();
    if (this.state === 'ready') await this.recordFootprint();
  }

  /** The most this replica held (its process and its user code's cgroup), kept per version for placement. */
  private footprint = 0;

  private async recordFootprint(): Promise<void> {
    const bytes = process.memoryUsage().rss + (this.user.memoryBytes() ?? 0);
    // Only when it grew by a twentieth: a write now and then, not on every heartbeat.
    if (bytes <= this.footprint * 1.05) return;
    this.footprint = bytes;
    await evalScript(this.o.redis, RAISE_FOOTPRINT, 1, keys.footprints(this.o.manifest.name), this.o.manifest.version, Math.round(bytes));
  }

  /** The bundle as a file in the node's cache (fetched from S3 once per content hash). */
  private async fetchBundle(): Promise<string> {
    const { bundle } = this.o.manifest;
    const file = path.join(this.o.cacheDir, 'bundles', `${bundle.sha256}.mjs`);
    if (!(await stat(file).catch(() => null))) {
      await linkPlatformModules(path.dirname(file));
      const tmp = `${file}.${process.pid}.tmp.mjs`;
      await writeFile(tmp, await this.o.store.get(bundle.key));
      await rename(tmp, file);
    }
    return file;
  }

  /**
   * The user-code process exited on its own. Over its memory limit: what it held was answered
   * 503 replica_oom (UserCodeProcess), the failure is recorded for `functions show`, and this
   * replica is replaced. Crashed: this replica exits at once without acknowledging what it held,
   * so the agent hands those requests over as for any crashed replica (a request that crashes
   * replicas twice is answered replica_crashed, not run a third time).
   */
  private userCodeExited(e: UserCodeExit): void {
    if (this.stopping) return;
    this.stopping = true;
    const error = { phase: this.state === 'starting' ? 'model_load' : 'run', message: `${e.oom ? 'out of memory: ' : ''}${this.user.exitMessage(e)}` };
    this.log.error({ ...error, oom: e.oom }, 'user-code process exited');
    if (!e.oom) return this.o.onUserCodeExit?.(e, false);
    this.error = error;
    this.state = 'failed';
    const { name, version } = this.o.manifest;
    void this.recordStart({ replica: this.o.id, version, at: new Date().toISOString(), error }, { type: 'replica', name, replica: this.o.id, state: 'failed', error })
      .catch(() => {})
      .finally(() => this.o.onUserCodeExit?.(e, true));
  }

  /**
   * Runs one request from either queue  /**
   * Runs one request from either queue; `crashes`: replicas that died holding it before. A live
   * request resolves with what its acknowledgement writes (usage record, reply); a batch line is
   * metered and answered here.
   */
  private async process(jobId: string, data: RunJobData, crashes: number, jobSignal?: AbortSignal): Promise<LiveOutcome | undefined> {
    const { rid, input, enq } = data;
    if (data.job) {
      const start = await this.startJob(jobId, data);
      if (start !== 'run') return start;
    }
    const queued = sinceEnqueued(data);
    const t0 = performance.now();
    const lane = data.batch ? 'batch' : 'live';
    this.lanes[lane]++;
    let status = 200;
    let body = '';
    // Set when the handler answered with bytes (binary(), a Uint8Array): body stays ''.
    let bytes: BinaryBody | undefined;
    let timing = unrunTiming(queued);
    let canceled = false;
    const log = () => this.log.child({ rid });
    // Only async jobs can be canceled (DELETE /v1/jobs/:id).
    const cancel = data.job ? new AbortController() : undefined;
    if (cancel) this.cancels.set(data.job!, cancel);
    try {
      if (crashes >= MAX_CRASHES) {
        // Replicas died twice while holding this request: it is likely the cause. Answer, don't run.
        status = 500;
        body = JSON.stringify(errorBody('replica_crashed', `${plainName(this.o.manifest.name)}: the replica crashed ${crashes} times while running this request; it was not retried again`));
        log().error({ crashes }, 'poison request answered without running');
      } else if (data.bodyMissing) {
        status = 500;
        body = JSON.stringify(errorBody('queue_entry_damaged', `${plainName(this.o.manifest.name)}: the request's body was missing from its queue entry, so it was not run; send it again`));
        log().error('binary body missing from the queue entry: answered without running');
      } else if (data.raw !== undefined && data.raw !== this.o.manifest.binaryInput) {
        // Bytes queued for a version that took them, run by one that does not (a rollout):
        // its schema would strip the field and run on defaults.
        status = 415;
        body = JSON.stringify(errorBody('unsupported_media_type', `${plainName(this.o.manifest.name)} version ${this.o.manifest.version} takes ${this.o.manifest.binaryInput ? `bytes as its "${this.o.manifest.binaryInput}"` : 'JSON bodies only'}, and the bytes were sent for "${data.raw}" (a new version became active meanwhile); send the request again`));
      } else {
        // The user code checks the input against the function's schema and runs the handler.
        const { n, result } = this.user.run({ rid, input, raw: data.raw, deadline: data.deadline, batch: lane === 'batch', queueMs: queued });
        const stop = (canceledByCaller: boolean) => () => this.user.abort(n, canceledByCaller);
        cancel?.signal.addEventListener('abort', stop(true), { once: true });
        jobSignal?.addEventListener('abort', stop(false), { once: true });
        const r = await result;
        ({ status, body } = r);
        if (r.bytes) bytes = { contentType: r.bytes.contentType, bytes: r.bytes.data };
        canceled = r.canceled === true && (cancel?.signal.aborted ?? false);
        // Metered by this process's clock; the user code's split is bounded by it.
        const handlerMs = Math.round((performance.now() - t0) * 100) / 100;
        const bound = (v: number | undefined) => Math.min(v ?? 0, handlerMs);
        timing = { queueMs: queued, handlerMs, inferMs: bound(r.timing.inferMs), execMs: bound(r.timing.execMs), batchMs: bound(r.timing.batchMs), inputMs: bound(r.timing.inputMs), outputMs: bound(r.timing.outputMs) };
      }
    } finally {
      this.lanes[lane]--;
      if (cancel) this.cancels.delete(data.job!);
    }
    // A request queued before this replica was ready waited for its cold start.
    const cold = enq < this.readyAt && this.coldStart ? { waitedMs: Math.min(this.coldStart.totalMs, this.readyAt - enq), phases: this.coldStart } : undefined;
    // A handler that stopped because it was canceled ends "canceled", not "failed".
    return this.deliver(jobId, data, { rid, status, replica: this.o.id, timing, ...(cold ? { cold } : {}) }, canceled ? CANCELED_BODY : body, canceled, canceled ? undefined : bytes);
  }

  private async processBatchJob(job: Job<RunJobData | BatchChunkData>, token: string | undefined, signal?: AbortSignal): Promise<void> {
    this.batchJobs++;
    try {
      const crashes = 'chunk' in job.data ? 0 : (job.stalledCounter ?? 0);
      const run = () => ('chunk' in job.data ? this.processChunk(job as Job<BatchChunkData>, signal) : this.process(job.id!, job.data, crashes, signal).then(() => {}));
      if (crashes > 0 && crashes < MAX_CRASHES) return await this.runAlone(job, token, run);
      if (this.alone !== undefined) return await this.stepOut(job, token, run);
      await run();
    } finally {
      this.batchJobs--;
      const ended = this.batchJobEnded;
      this.batchJobEnded = undefined;
      ended?.();
    }
  }

  /**
   * Runs a batch line that a replica died holding alone among this replica's batch jobs. A crash
   * ends every job its replica held, so the lines that ran beside a line that kills replicas came
   * back with it, counted as crashed too, and (stalled jobs come back together) ran beside it
   * again: they reached MAX_CRASHES with it and were answered `replica_crashed` without being at
   * fault. Alone, a second crash is the line's own. Such a line turns the worker down to one job
   * at a time (isolate). If other batch jobs are running here it steps out too, to the front of
   * the wait list, rather than wait inside the worker, where a crash would count against it (the
   * next replica with a free slot takes it, and turns down the same way; this one takes it when
   * its running jobs end, if no other did); else it runs, and a job the worker fetched before (or
   * fetches meanwhile) steps out. Live requests still run beside it.
   */
  private async runAlone(job: Job, token: string | undefined, run: () => Promise<void>): Promise<void> {
    this.isolate();
    if (this.alone !== undefined) return this.stepOut(job, token, run);
    this.alone = job.id!;
    try {
      // Jobs the worker fetched before its concurrency dropped enter processBatchJob now (and step out).
      await new Promise((resolve) => setImmediate(resolve));
      if (this.batchJobs - this.steppingOut > 1) return await this.stepOut(job, token, run);
      while (this.batchJobs > 1) await new Promise<void>((resolve) => (this.batchJobEnded = resolve));
      this.log.warn({ job: job.id, crashes: job.stalledCounter }, 'a replica died holding this batch line: it runs alone');
      await run();
    } finally {
      this.alone = undefined;
    }
  }

  /**
   * Leaves the worker, back to the front of the wait list, without counting an attempt (a batch
   * line runs alone here, or this one must and others run here): another replica, or this one
   * when a job ends, takes it next. If Redis cannot be reached, the job runs now all the same; if
   * the job is no longer this replica's (its lock was lost), it is left alone.
   */
  private async stepOut(job: Job, token: string | undefined, run: () => Promise<void>): Promise<void> {
    this.steppingOut++;
    try {
      await job.moveToWait(token);
    } catch (err) {
      if (typeof (err as { code?: unknown }).code !== 'number') {
        this.log.warn({ job: job.id, err: (err as Error).message }, 'could not step out while a batch line runs alone: running it now');
        return run();
      }
    } finally {
      this.steppingOut--;
    }
    throw new WaitingError();
  }

  /** One batch job at a time until ISOLATION_MS after the last line that runs alone came, and none runs alone. */
  private isolate(): void {
    const worker = this.batchWorker!;
    worker.concurrency = 1;
    clearTimeout(this.isolation);
    const end = () => {
      if (this.alone !== undefined) this.isolation = setTimeout(end, ISOLATION_MS).unref();
      else {
        this.isolation = undefined;
        worker.concurrency = this.o.batchConcurrency;
      }
    };
    this.isolation = setTimeout(end, ISOLATION_MS).unref();
  }

  /**
   * A chunk of batch lines: each runs as it would alone (its own slot in the batcher, metered and
   * recorded under its own id), side by side. A chunk whose replica died is not run again as one:
   * its lines without an outcome go back to the queue one a job, so a line that kills replicas
   * is found and answered alone (process: MAX_CRASHES) instead of taking the chunk's others with
   * it (it costs one crash more than a line queued alone).
   */
  private async processChunk(job: Job<BatchChunkData>, signal?: AbortSignal): Promise<void> {
    const { chunk } = job.data;
    // Lines that have an outcome are not run again (a chunk queued again by a feeder that resumed
    // after its first copy had run and left the queue).
    const done = await this.batchStore.haveResults(chunk.batch, chunk.lines.map((l) => l.line));
    const left = chunk.lines.filter((_, i) => !done[i]);
    if ((job.stalledCounter ?? 0) > 0) {
      // A cancelled or finished batch wants no more lines.
      if ((await this.batchStore.status(chunk.batch)) !== 'in_progress') return;
      this.log.warn({ job: job.id, lines: chunk.lines.length, left: left.length }, 'a replica died holding this chunk of batch lines: its lines go back one a job');
      await this.batchQueue().addBulk(chunkLineJobs(job.data, left));
      return;
    }
    // Each line's handler listens to the chunk's signal: more than Node's default 10 is expected.
    if (signal) setMaxListeners(0, signal);
    const runs = await Promise.allSettled(chunkLineJobs(job.data, left).map(({ data }) => this.process(data.rid, data, 0, signal)));
    const failed = runs.find((r) => r.status === 'rejected');
    if (failed) throw failed.reason;
  }

  private batchQueue(): Queue {
    return (this.batchQueueHandle ??= new Queue(batchQueueName(this.o.manifest.name), { connection: this.o.redis, prefix: QUEUE_PREFIX }));
  }

  /**
   * Moves an async job to running ('run'), or says why it must not run (canceled, finished,
   * expired) with what acknowledging its entry writes.
   */
  private async startJob(jobId: string, data: RunJobData): Promise<'run' | LiveOutcome | undefined> {
    const id = data.job!;
    const state = await this.jobStore.start(id, this.o.id);
    if (state === 'running') return 'run';
    if (state === 'cancel') {
      const zero = unrunTiming(sinceEnqueued(data));
      return this.deliver(jobId, data, { rid: data.rid, status: 499, replica: this.o.id, timing: zero }, CANCELED_BODY, true);
    }
    if (!isTerminal(state)) return undefined;
    // Finished by an earlier run that died before its entry was acknowledged: queue the webhook
    // (deduped by id), and meter it from the record, unless the gateway finished it (a queued job
    // canceled: metered there). Metered only if this acknowledgement is the first.
    const [url, by, httpStatus, timing, result, finishedAt] = await this.o.redis.hmget(keys.job(id), 'webhook', 'finishedBy', 'httpStatus', 'timing', 'result', 'finishedAt');
    if (url) await enqueueWebhook(this.webhooks(), { job: id, url });
    if (by !== 'replica') return undefined;
    const t = (JSON.parse(timing ?? 'null') as ReplyHeader['timing'] | null) ?? unrunTiming(0);
    const usage = this.usageRecord(jobId, data, { rid: data.rid, status: Number(httpStatus ?? 0), replica: this.o.id, timing: t }, Buffer.byteLength(result ?? ''));
    return { usage: { ...usage, at: finishedAt ?? usage.at } };
  }

  private usageRecord(jobId: string, data: RunJobData, header: ReplyHeader, bytesOut: number): UsageRecord {
    const { name, version } = this.o.manifest;
    const t = header.timing;
    return {
      id: jobId,
      tenant: data.t ?? 'default',
      key: data.k ?? 'unknown',
      fn: name,
      version,
      kind: data.gw ? 'sync' : data.job ? 'async' : 'batch',
      status: header.status,
      queueMs: t.queueMs,
      computeMs: t.handlerMs,
      inferMs: Math.round(t.inferMs * 100) / 100,
      coldMs: header.cold?.waitedMs ?? 0,
      bytesIn: data.bin ?? 0,
      bytesOut,
      at: new Date().toISOString(),
    };
  }

  /**
   * Sends the outcome where the job says. A live request's usage record, and a sync request's
   * reply, are written when its entry is acknowledged (after an async job's record is finished),
   * so a request is metered once; a busy replica's replies go in that same call, a lone one's
   * just before it (LiveConsumer.flushFinished). A batch line is metered under its id, with the
   * other records of the tick, and its output written. `bytes`: the handler answered with bytes
   * (`body` is then unused): a sync caller gets them as they are (through Redis too: the reply's
   * body is bytes, its header says their type), an async job and a batch line as JSON (binaryAsJson).
   */
  private async deliver(jobId: string, data: RunJobData, header: ReplyHeader, body: string, canceled: boolean, bytes?: BinaryBody): Promise<LiveOutcome | undefined> {
    if (header.status >= 500) this.jobs.failed++;
    else this.jobs.completed++;
    // Metered by what the caller gets: a sync caller the bytes, an async job and a batch line their JSON.
    if (bytes && !data.gw) body = binaryAsJson(bytes);
    const usage = this.usageRecord(jobId, data, header, bytes && data.gw ? bytes.bytes.length : Buffer.byteLength(body));
    if (data.gw) {
      if (data.id) header = { ...header, id: data.id };
      let message: string | Buffer = bytes ? encodeReply({ ...header, type: bytes.contentType }, bytes.bytes) : encodeReply(header, body);
      // A large text reply goes to ioredis as bytes, encoded once: as a string it is measured,
      // copied into the command's text and encoded again, and each fresh copy of a megabyte costs
      // ms in page faults here (a 1.28 MB JSON answer cost the replica ~31 ms of CPU, bytes ~7).
      if (typeof message === 'string' && message.length > LARGE_REPLY) message = Buffer.from(message);
      return { usage, reply: { channel: keys.replyChannel(data.gw), message } };
    }
    if (data.job) {
      const done = await this.jobStore.finish(data.job, { httpStatus: header.status, body, type: bytes?.contentType, canceled, timing: header.timing, version: this.o.manifest.version });
      if (done.webhook) await enqueueWebhook(this.webhooks(), { job: data.job, url: done.webhook });
      return { usage };
    }
    if (data.batch) {
      const metered = recordUsage(this.o.redis, usage).catch((err: Error) => this.log.error({ err: err.message, rid: data.rid }, 'could not record usage'));
      try {
        const { id, line, cid } = data.batch;
        const ok = header.status < 400;
        const error = ok ? undefined : { ...((JSON.parse(body) as { error: { code: string; message: string } }).error ?? { code: 'error', message: body }), status: header.status };
        await this.batchStore.lineDone(id, line, ok, ok ? outputLine(cid, body) : errorLine(cid, line, error!));
      } finally {
        await metered;
      }
    }
    return undefined;
  }

  private webhooks(): Queue {
    return (this.webhookQueue ??= new Queue(WEBHOOK_QUEUE, { connection: this.o.redis, prefix: QUEUE_PREFIX }));
  }

}

/** Text replies longer than this (UTF-16 units) are handed to Redis as bytes (deliver). */
const LARGE_REPLY = 64 * 1024;

/** A request whose replica died this many times is answered 500 instead of run again. */
const MAX_CRASHES = 2;
/** How long a replica's batch worker stays at one job at a time after a line that runs alone came (isolate). */
const ISOLATION_MS = 5_000;

/** The id a live request is metered under: its async job id, the id the gateway gave it, or its stream entry (unique within the function's stream). */
const liveJobId = (fn: string, entry: string, data: RunJobData) => data.job ?? data.id ?? `${fn}:${entry}`;
