// A replica: one process serving one function version, the trusted half of it. It fetches the
// bundle and models, has its user-code process (user-code-process.ts: the tenant's code, in a
// sandbox without the platform's credentials) load them, then consumes the function's two
// queues, live requests (live-consumer.ts) and batch lines (batch-lane.ts), hands each request
// to the user code, and sends what comes back where it goes, metered (delivery.ts). Each queue
// has its own slots; batch lines yield the models to live requests.
import os from 'node:os';
import type { Redis } from 'ioredis';
import { sinceEnqueued } from '../../core/clock.ts';
import { destinationOf, type ColdStartPhases, type PlatformEvent, type ReplyHeader, type RunJobData } from '../../core/contracts.ts';
import { keys, SCAN_NOW, TAIL_NOW } from '../../core/keys.ts';
import type { Pricing } from '../../core/pricing.ts';
import { liveJobId, type LiveOutcome } from '../../core/live-queue.ts';
import type { Logger } from '../../core/log.ts';
import { plainName } from '../../core/names.ts';
import { lua } from '../../core/lua.ts';
import { evalScript } from '../../core/redis.ts';
import { waitAtMost } from '../../core/settle.ts';
import { answerWaiting } from './answer-waiting.ts';
import { BatchLane } from './batch-lane.ts';
import { Delivery, USAGE_KIND } from './delivery.ts';
import { replicaTail, type TailGate, type TailWriter } from './tail.ts';
import { LiveConsumer } from './live-consumer.ts';
import { loadFunction, type LoadOptions } from './load.ts';
import { refusal } from './refusals.ts';
import { runOnUserCode, type RunContext, type RunEnd } from './run-request.ts';
import { Calls, type CallsOptions } from './calls.ts';
import { waker } from '../../core/wake.ts';
import { Stops } from './stops.ts';
import { unrunTiming } from '../channel/timing.ts';
import { StartFailure, type UserStats } from '../channel/messages.ts';
import { LiveFirst } from '../channel/live-first.ts';
import type { UserCodeExit, UserCodeProcess } from './user-code-process.ts';
import type { ReplicaCounters } from './agent-messages.ts';

export type ReplicaState = 'starting' | 'ready' | 'draining' | 'failed';

export type ColdStart = ColdStartPhases;

export interface ReplicaOptions extends LoadOptions {
  redis: Redis;
  log: Logger;
  /** Live requests (sync and async) a replica runs at once. */
  concurrency: number;
  /** Batch lines a replica runs at once, in slots of their own. */
  batchConcurrency: number;
  heartbeatMs: number;
  lockMs: number;
  /** Id of the node agent that started it. */
  node?: string;
  /** When the node agent spawned this process (ms since epoch), for the spawn phase. */
  spawnedAt?: number;
  /** How long async job results are kept. */
  jobRetentionS: number;
  /** Prices of a version that sets no `pricing` (EMBERS_PRICE_*), charged in its usage records. */
  platformPricing: Pricing;
  /** Called when a handler will not stop: the process should exit so the agent replaces it. */
  onStuck?: () => void;
  /** Set when this node may not run the function's code: the start fails in phase "sandbox" with this message. */
  refuse?: string;
  /** The user-code process's memory limit (bytes), reported with the replica. */
  memoryLimitBytes: number;
  /** Called when the user-code process ended while serving (crash, memory, a broken channel): this process should abandon what is left and exit, so the agent replaces it. */
  onUserCodeExit?: (e: UserCodeExit) => void;
  /** Called with every heartbeat, and once more when it has drained: what it has done so far (for the agent's /metrics). */
  onCounters?: (c: ReplicaCounters) => void;
  /** What its handlers' calls to other functions need (absent: ctx.call is answered 501). */
  calls?: Pick<CallsOptions, 'live' | 'functions' | 'maxDepth' | 'queueTimeoutMs' | 'redisMemoryLimitBytes'>;
}

const RAISE_FOOTPRINT = lua('footprint-raise');
/** Longest a replica that abandons what it holds waits for its user-code process to end (one stuck in the kernel). */
const KILL_WAIT_MS = 5_000;
/** A draining replica waits this long, at most, for its last tail lines to be written (Redis may be away). */
const TAIL_FLUSH_WAIT_MS = 2_000;

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
  /** Per model: provider, loaded instances, and the batcher's counters; `lone`: where a lone request's inferences run (its medians null until measured). */
  models: UserStats['models'];
  /** Memory the user-code process's cgroup uses, and its limit (bytes). */
  memory?: { usedBytes?: number; limitBytes: number };
}

export class Replica {
  private state: ReplicaState = 'starting';
  /** Live requests (sync and async): the function's stream. */
  private live?: LiveConsumer;
  /** Batch lines: the function's BullMQ batch queue. */
  private batch?: BatchLane;
  /** Jobs running now, by lane. */
  private readonly lanes = { live: 0, batch: 0 };
  private heartbeat?: NodeJS.Timeout;
  private coldStart?: ColdStart;
  private error?: ReplicaRecord['error'];
  private readonly startedAt = new Date();
  private readyAt = 0;
  private readonly log: Logger;
  private readonly delivery: Delivery;
  /** Running requests their callers may stop: async jobs (DELETE /v1/jobs/:id), sync runs whose caller went away. */
  private readonly stops = new Stops();
  /** What running a request on the user code needs. */
  private readonly runs: RunContext;
  private cancelSub?: Redis;
  private readonly user: UserCodeProcess;
  /** The user-code process is being stopped (drain, abandon) or is gone. */
  private stopping = false;
  /** Whether anyone tails the function, and what this replica writes to its tail meanwhile. */
  private readonly tail: { gate: TailGate; writer: TailWriter };
  /**
   * The node's live-first window (live-first.ts): this replica announces itself busy from the live
   * requests it hands its user code and gets back (never from what the user code says), and
   * tells its user code whether other replicas are.
   */
  private readonly liveWindow: LiveFirst;
  /** Answers being delivered: a replica replacing its user code lets them finish before handing the rest over. */
  private readonly delivering = new Set<Promise<unknown>>();

  constructor(private readonly o: ReplicaOptions) {
    this.log = o.log.child({ replica: o.id, fn: o.manifest.name, version: o.manifest.version });
    this.delivery = new Delivery({ redis: o.redis, manifest: o.manifest, replica: o.id, jobRetentionS: o.jobRetentionS, platformPricing: o.platformPricing, log: this.log });
    this.user = o.userCode;
    this.liveWindow = new LiveFirst({
      yieldMs: o.batchYieldMs,
      announce: (busy) => void o.redis.publish(keys.liveChannel(this.nodeId), `${o.id} ${busy ? 1 : 0}`).catch(() => {}),
      onPeers: (busy) => this.user.peers(busy),
    });
    this.user.onStuck = (rid) => this.stuck(rid);
    this.user.onExit = (e) => this.userCodeExited(e);
    const fn = o.manifest.name;
    this.tail = replicaTail({ redis: o.redis, fn, replica: o.id, version: o.manifest.version, log: this.log });
    this.user.onLogsDropped = (count) => this.tail.writer.dropped(count);
    // Only while it starts: the user code could send such lines at any time.
    this.user.onStartLog = (phase, call) => this.state === 'starting' && this.tail.gate.on() && this.tail.writer.startLog(phase, call);
    const calls = o.calls && this.callsOf(o.calls);
    if (calls) {
      this.user.onCallAbort = (c) => calls.abort(c);
      this.user.onCallCredit = (c, k) => calls.credit(c, k);
    }
    this.runs = { user: this.user, redis: o.redis, stops: this.stops, fn: plainName(fn), timeoutMs: o.manifest.timeoutMs, jobRetentionS: o.jobRetentionS, tail: this.tail, calls };
  }

  /** Its handlers' calls to other functions: queued as this replica, answered on its own channel. */
  private callsOf(c: NonNullable<ReplicaOptions['calls']>): Calls {
    return new Calls({
      ...c,
      redis: this.o.redis,
      replica: this.o.id,
      fn: this.o.manifest.name,
      answer: (n, status, body) => this.user.callResult(n, status, body),
      chunk: (n, data) => this.user.callChunk(n, data),
      lend: () => this.live?.lend() ?? false,
      reclaim: () => this.live?.reclaim(),
      wake: waker(this.o.redis),
      log: this.log,
    });
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
      jobs: { active: this.lanes.live + this.lanes.batch, ...this.delivery.counts },
      liveFirst: stats?.liveFirst,
      gc: stats?.gc,
      models: stats?.models ?? {},
      memory: { usedBytes: this.user.memoryBytes(), limitBytes: this.o.memoryLimitBytes },
    };
  }

  /** Starts the replica; false when it was stopped (or its user code failed) while loading, and never serves. */
  async start(): Promise<boolean> {
    const { manifest } = this.o;
    // spawn: from the agent's spawn() to this process running our code.
    const began = this.o.spawnedAt ?? Date.now();
    const spawnMs = Math.max(0, Date.now() - began);
    // Whether the function is tailed, read now: setup's log lines come before any request.
    this.tail.gate.on();
    await this.beat();
    this.heartbeat = setInterval(() => void this.beat().catch((err) => this.log.warn({ err }, 'heartbeat failed')), this.o.heartbeatMs);
    const at = { phase: 'bundle' };
    try {
      if (this.o.refuse) {
        at.phase = 'sandbox';
        throw new Error(this.o.refuse);
      }
      this.coldStart = { spawnMs, ...(await loadFunction(this.o, at)), totalMs: Date.now() - began };
    } catch (err) {
      this.moveTo('failed');
      const phase = err instanceof StartFailure ? err.phase : at.phase;
      const error = (this.error = { phase, message: (err as Error).message });
      this.log.error({ err, phase }, 'replica failed to start');
      // A tail watching the start sees why it failed, after what its setup logged; the process exits next.
      if (this.tail.gate.on()) this.tail.writer.startLog(phase, { level: 'error', msg: `replica failed to start in ${phase}: ${error.message}`, time: Date.now() });
      await waitAtMost(this.tail.writer.flush(), TAIL_FLUSH_WAIT_MS, this.log, 'the tail\'s last lines');
      await this.beat().catch(() => {});
      const { name, version } = manifest;
      await this.recordStart({ replica: this.o.id, version, at: new Date().toISOString(), error }, { type: 'replica', name, replica: this.o.id, state: 'failed', error })
        .then(() => answerWaiting({ redis: this.o.redis, manifest, replica: this.o.id, delivery: this.delivery }, error))
        .catch((e) => this.log.warn({ err: (e as Error).message }, 'could not answer waiting requests'));
      throw err;
    }
    if (this.state !== 'starting') return false;
    // Listening for cancellations before the first job can arrive (the worker starts fetching at once).
    this.cancelSub = this.o.redis.duplicate();
    this.cancelSub.on('error', () => {});
    const liveChannel = keys.liveChannel(this.nodeId);
    this.cancelSub.on('message', (channel: string, message: string) => {
      const [a, b] = message.split(' ');
      if (channel === liveChannel) {
        if (a !== this.o.id) this.liveWindow.peer(a, b === '1');
      } else if (a === manifest.name) {
        if (b === SCAN_NOW) this.live?.scanNow();
        else if (b === TAIL_NOW) this.tail.gate.nudge();
        else this.stops.stop(b);
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
      // A request waiting on calls lends its slot: a chain of calls back into this function runs here too.
      maxLent: this.o.calls ? this.o.concurrency * this.o.calls.maxDepth : 0,
      lockMs: this.o.lockMs,
      process: (entry, data, deliveries) => this.process(liveJobId(manifest.name, entry, data), data, deliveries - 1),
      log: this.log,
    });
    await this.live.start();
    this.batch = new BatchLane({
      redis: this.o.redis,
      fn: manifest.name,
      concurrency: this.o.batchConcurrency,
      lockMs: this.o.lockMs,
      batchStore: this.delivery.batchStore,
      log: this.log,
      run: (jobId, data, crashes, signal) => this.process(jobId, data, crashes, signal),
    });
    this.batch.start();
    // Stopped while it subscribed and started its consumers: the stop drains them.
    if (this.state !== 'starting') return false;
    this.moveTo('ready');
    this.readyAt = Date.now();
    // Read once now, so a replica started while its function is tailed tails its first request.
    this.tail.gate.on();
    await this.beat();
    await this.announceColdStart();
    this.log.info({ coldStart: this.coldStart }, 'replica ready');
    return true;
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

  private stuck(rid: string): void {
    if (this.state === 'draining') return;
    this.log.error({ rid, graceMs: this.o.handlerGraceMs }, 'handler still running after its timeout and grace: replacing this replica');
    this.moveTo('draining');
    void this.beat().catch(() => {});
    this.o.onStuck?.();
  }

  /**
   * Stops at once: what its user code held and had not answered is handed over (live requests now,
   * batch lines when their locks expire); what it had answered is delivered first.
   */
  async abandon(): Promise<void> {
    this.live?.stop();
    clearInterval(this.heartbeat);
    this.cancelSub?.disconnect();
    this.runs.calls?.close();
    this.liveWindow.close();
    this.stopping = true;
    await waitAtMost(this.user.kill(), KILL_WAIT_MS, this.log, 'the user-code process to end');
    await waitAtMost(Promise.all(this.delivering), TAIL_FLUSH_WAIT_MS, this.log, 'the answers being delivered');
    await this.live?.abandon();
    await this.batch?.close(true);
    await this.o.redis.multi().del(keys.replica(this.o.id)).srem(keys.replicas(this.o.manifest.name), this.o.id).exec().catch(() => {});
  }

  /** Takes no more jobs, finishes those it holds, then releases its models. */
  async drain(): Promise<void> {
    if (this.state === 'draining') return;
    this.moveTo('draining');
    await this.beat().catch(() => {});
    await Promise.all([this.live?.drain(), this.batch?.close()]);
    await waitAtMost(this.tail.writer.flush(), TAIL_FLUSH_WAIT_MS, this.log, 'the tail\'s last lines');
    clearInterval(this.heartbeat);
    this.reportCounters();
    this.cancelSub?.disconnect();
    this.runs.calls?.close();
    this.liveWindow.close();
    await this.delivery.close();
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
    const record = this.record();
    this.reportCounters(record.models);
    await this.o.redis
      .multi()
      .set(keys.replica(this.o.id), JSON.stringify(record), 'PX', ttl)
      .sadd(keys.replicas(this.o.manifest.name), this.o.id)
      .exec();
    if (this.state === 'ready') await this.recordFootprint();
  }

  /** Hands the agent what this replica has done: its deliveries' metering and its models' batchers. */
  private reportCounters(models = this.user.stats()?.models ?? {}): void {
    if (!this.o.onCounters) return;
    const byModel: ReplicaCounters['models'] = {};
    for (const [name, m] of Object.entries(models)) byModel[name] = { calls: m.requests, inferences: m.inferences, executions: m.executions, inferMs: m.inferMsTotal, failures: m.failures };
    this.o.onCounters({ usage: { ...this.delivery.metered }, models: byModel });
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

  /**
   * The user-code process ended while serving (while starting, start() reports it). A run's
   * failure stays with that run: broke its channel, or died holding one run, and what it held was
   * answered (UserCodeProcess); died holding several, and none was, so this replica hands them
   * over unacknowledged, each to run alone on the next (decisions/007). Either
   * way the failure is kept with the function's starts for `functions show`, told to its tail,
   * and the replica replaced; gateways keep taking requests (no start failure is announced).
   */
  private userCodeExited(e: UserCodeExit): void {
    if (this.stopping || this.state === 'starting') return;
    this.stopping = true;
    // Nothing more is taken: a request taken now would count a crash it never saw.
    this.live?.stop();
    void this.batch?.close(true);
    const error = { phase: 'run', message: `${e.oom ? 'out of memory: ' : ''}${this.user.exitMessage(e)}` };
    this.log.error({ ...error, oom: e.oom, handedOver: e.lost }, 'user-code process exited');
    this.error = error;
    this.moveTo('failed');
    if (this.tail.gate.on()) this.tail.writer.startLog('run', { level: 'error', msg: `replica ${this.o.id} replaced: ${error.message}${e.lost ? `; ${e.lost} requests it held run again on another replica` : ''}`, time: Date.now() });
    const record = { replica: this.o.id, version: this.o.manifest.version, at: new Date().toISOString(), error };
    const list = keys.coldStarts(this.o.manifest.name);
    const recorded = this.o.redis.multi().lpush(list, JSON.stringify(record)).ltrim(list, 0, 19).exec();
    void waitAtMost(Promise.all([recorded, this.tail.writer.flush()]), TAIL_FLUSH_WAIT_MS, this.log, 'the failure\'s record').finally(() => this.o.onUserCodeExit?.(e));
  }

  /**
   * Runs one request from either queue; `crashes`: replicas that died holding it before. A live
   * request resolves with what its acknowledgement writes (usage record, reply); a batch line is
   * metered and answered here.
   */
  private async process(jobId: string, data: RunJobData, crashes: number, jobSignal?: AbortSignal): Promise<LiveOutcome | undefined> {
    const { rid, enq } = data;
    if (data.job) {
      const start = await this.delivery.startJob(jobId, data);
      if (start !== 'run') return start;
    }
    const queued = sinceEnqueued(data);
    const lane = data.batch ? 'batch' : 'live';
    this.lanes[lane]++;
    if (lane === 'live') this.liveWindow.liveStarted();
    let end: RunEnd;
    try {
      const refused = refusal(this.o.manifest, data, crashes);
      if (refused?.log) this.log.child({ rid }).error({ crashes: refused.log.crashes }, refused.log.message);
      end = refused ? { ...refused, timing: unrunTiming(queued) } : await runOnUserCode(this.runs, data, queued, jobSignal);
    } finally {
      this.lanes[lane]--;
      if (lane === 'live') this.liveWindow.liveEnded();
    }
    // A request queued before this replica was ready waited for its cold start.
    const cold = enq < this.readyAt && this.coldStart ? { waitedMs: Math.min(this.coldStart.totalMs, this.readyAt - enq), phases: this.coldStart } : undefined;
    const header: ReplyHeader = { rid, status: end.status, replica: this.o.id, timing: end.timing, ...(cold ? { cold } : {}) };
    if (end.chunks !== undefined) header.chunks = end.chunks;
    if (this.tail.gate.on()) {
      const kind = USAGE_KIND[destinationOf(data)?.to ?? 'batch'];
      this.tail.writer.request({ rid, status: end.status, ms: end.timing.handlerMs, queueMs: end.timing.queueMs, cold: cold !== undefined, ...(cold ? { coldMs: cold.waitedMs } : {}), kind, ...(data.parent ? { parent: data.parent } : {}) });
    }
    const delivered = this.delivery.deliver(jobId, data, header, end.body, end);
    this.delivering.add(delivered);
    void delivered.finally(() => this.delivering.delete(delivered)).catch(() => {});
    return delivered;
  }

  /** Moves to `next`, which must follow from the state it is in (STATE_MOVES). */
  private moveTo(next: ReplicaState): void {
    if (next === this.state) return;
    if (!STATE_MOVES[this.state].includes(next)) throw new Error(`replica ${this.o.id}: no move from ${this.state} to ${next}`);
    this.state = next;
  }
}

/**
 * Where each state may lead: a replica starts, then serves or fails; it drains when stopped or
 * when a handler will not stop; its user code running out of memory fails it from any state.
 */
const STATE_MOVES: Record<ReplicaState, ReplicaState[]> = {
  starting: ['ready', 'failed', 'draining'],
  ready: ['draining', 'failed'],
  draining: ['failed'],
  failed: ['draining'],
};
