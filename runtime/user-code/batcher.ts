// Dynamic batcher, one per model per replica (Triton's dynamic batcher, Ray Serve's
// @serve.batch): gather run() calls with the same non-batch shape until maxBatchSize rows or
// until the oldest has waited maxDelayMs, concatenate along dim 0, run once, split back.
// While every instance of the model is busy, calls keep gathering, so load turns into larger
// batches; a free instance takes the next batch at once.
// Calls come from one of two lanes, live requests or batch lines: the two never share an
// inference, live ones go first, and batch ones start only while `batchMayRun()` says so
// (see live-first.ts).
// maxBatchSize is an upper bound: batches stop growing at the size the model's own timings say
// is cheapest per row (batch-tuner.ts).
import { batchKey, concatFeeds, rows, splitOutputs, type Feeds } from '../../native/tensor.ts';
import { BatchTuner } from './batch-tuner.ts';
import { systemClock, type Clock } from '../../core/clock.ts';

/** Where a call comes from: a live request, or a bulk batch's line (which yields to live ones). */
export type Lane = 'live' | 'batch';

export interface BatchResult {
  outputs: Feeds;
  /** Inference time of the batch, as measured by the executor. */
  inferMs: number;
  /** It ran on a session with more threads than under load. */
  wide?: boolean;
  /** It had the replica to itself, wide or not (left out of batch-size tuning). */
  lone?: boolean;
}

export interface BatcherOptions {
  maxBatchSize: number;
  maxDelayMs: number;
  /** Runs one inference batch, of one lane's calls. */
  execute: (feeds: Feeds, lane: Lane) => Promise<BatchResult>;
  clock?: Clock;
  /**
   * How many callers of a priority could still join a batch (e.g. the replica's requests in
   * flight). When every one of them is already waiting here, waiting longer gains nothing: run at once.
   */
  potentialCallers?: (lane: Lane) => number;
  /** Whether batch lines' calls may start an inference now; when it turns true, call poke(). @default always */
  batchMayRun?: () => boolean;
  /**
   * Most calls in one inference of batch lines: a live call arriving while it runs waits for it,
   * since inferences are not preempted. @default no limit beyond maxBatchSize
   */
  batchMaxCalls?: number;
  /** Learn the cheapest batch size from inference times and cap batches there. @default true */
  tune?: boolean;
  /** Inferences that may run at once (the model's loaded instances). @default 1 */
  instances?: () => number;
}

export interface BatcherStats {
  /** run() calls. */
  requests: number;
  /** Rows inferred (Triton's inference_count). */
  inferences: number;
  /** Inferences executed (Triton's execution_count); inferences / executions = mean batch rows. */
  executions: number;
  /** Most calls that shared one execution. */
  maxCallsPerBatch: number;
  /** Executions by how many calls they carried: { "1": 40, "4": 3 }. */
  callsPerBatch: Record<string, number>;
  inferMsTotal: number;
  /** Executions that ran alone on every core (ModelSession's wide session). */
  wide: number;
  failures: number;
  /** Rows the next batch may gather (maxBatchSize, or less where the tuner found it cheaper). */
  cap: number;
  /** The tuner's cost per row (ms) by batch size. */
  costPerRow: Record<string, { msPerRow: number; samples: number }>;
}

export interface RunResult {
  outputs: Feeds;
  /** This caller's share of the batch's inference time (by rows): what it is metered for. */
  inferMs: number;
  /** The whole batch's inference time: how long the caller's inference ran. */
  execMs: number;
  /** Time from run() to the start of its batch. */
  waitMs: number;
}

/** What a caller may pass with its feeds. */
export interface RunOptions {
  /** Aborting it takes the call back while it still waits for its batch (it rejects with the reason); a call already running finishes. */
  signal?: AbortSignal;
  /** Called once, when the call's batch starts (not if it is taken back or never starts). */
  onStart?: () => void;
}

interface Pending {
  feeds: Feeds;
  rows: number;
  at: number;
  resolve: (r: RunResult) => void;
  reject: (e: unknown) => void;
  onStart?: () => void;
}

interface Group {
  key: string;
  lane: Lane;
  calls: Pending[];
  rows: number;
  oldest: number;
}

export class DynamicBatcher {
  readonly stats: BatcherStats;
  private readonly tuner?: BatchTuner;
  private readonly groups = new Map<string, Group>();
  private readonly full: Group[] = [];
  /** Inferences running now. */
  private running = 0;
  /** Calls in the running inferences, by lane: their callers cannot join another batch now. */
  private readonly inFlight: Record<Lane, number> = { live: 0, batch: 0 };
  private timer: unknown = null;
  private readonly clock: Clock;

  constructor(private readonly options: BatcherOptions) {
    if (!(options.maxBatchSize >= 1)) throw new RangeError('maxBatchSize must be at least 1');
    if (!(options.maxDelayMs >= 0)) throw new RangeError('maxDelayMs must be 0 or more');
    this.clock = options.clock ?? systemClock;
    if (options.tune ?? true) this.tuner = new BatchTuner({ maxBatchSize: options.maxBatchSize });
    this.stats = { requests: 0, inferences: 0, executions: 0, maxCallsPerBatch: 0, callsPerBatch: {}, inferMsTotal: 0, wide: 0, failures: 0, cap: options.maxBatchSize, costPerRow: {} };
  }

  /** Calls waiting for a batch (not yet executing), of one priority or of both. */
  pending(lane?: Lane): number {
    let n = 0;
    for (const g of [...this.full, ...this.groups.values()]) if (lane === undefined || g.lane === lane) n += g.calls.length;
    return n;
  }

  /** Runs the feeds in the next batch of their shape and lane; batch lines yield to live calls. */
  run(feeds: Feeds, lane: Lane = 'live', o: RunOptions = {}): Promise<RunResult> {
    const n = rows(feeds);
    if (!(n >= 1)) return Promise.reject(new RangeError('feeds need at least one input with a batch dimension ≥ 1'));
    const { signal } = o;
    if (signal?.aborted) return Promise.reject(signal.reason);
    this.stats.requests++;
    return new Promise<RunResult>((resolve, reject) => {
      // A handler past its timeout (or a canceled job) takes back a call still waiting, e.g. a batch
      // line's held back while live requests run: its handler can settle, instead of the replica
      // waiting for a call that may not start for a long time and replacing itself as stuck.
      const onAbort = () => {
        if (!this.withdraw(call)) return;
        reject(signal!.reason);
        // Once the abort's other listeners (the same handler's other calls) have left too.
        queueMicrotask(() => this.dispatch());
      };
      const settle = <T>(f: (v: T) => void) => (v: T) => {
        signal?.removeEventListener('abort', onAbort);
        f(v);
      };
      const call: Pending = { feeds, rows: n, at: this.clock.now(), resolve: settle(resolve), reject: settle(reject), onStart: o.onStart };
      signal?.addEventListener('abort', onAbort, { once: true });
      const key = `${lane}|${batchKey(feeds)}`;
      const cap = this.stats.cap;
      let group = this.groups.get(key);
      if (group && group.rows + n > cap) {
        this.seal(group);
        group = undefined;
      }
      if (!group) {
        group = { key, lane, calls: [], rows: 0, oldest: call.at };
        this.groups.set(key, group);
      }
      group.calls.push(call);
      group.rows += n;
      if (group.rows >= cap || (lane === 'batch' && group.calls.length >= (this.options.batchMaxCalls ?? Infinity))) this.seal(group);
      this.dispatch();
    });
  }

  /** Takes a waiting call out of its group; false if it is not waiting (its batch started). */
  private withdraw(call: Pending): boolean {
    const full = this.full.findIndex((g) => g.calls.includes(call));
    const g = full >= 0 ? this.full[full] : [...this.groups.values()].find((g) => g.calls.includes(call));
    if (!g) return false;
    g.calls.splice(g.calls.indexOf(call), 1);
    g.rows -= call.rows;
    if (g.calls.length) g.oldest = Math.min(...g.calls.map((c) => c.at));
    else if (full >= 0) this.full.splice(full, 1);
    else this.groups.delete(g.key);
    return true;
  }

  private seal(group: Group): void {
    this.groups.delete(group.key);
    this.full.push(group);
  }

  /** Re-checks what may run (e.g. batch lines' calls were allowed again). */
  poke(): void {
    this.dispatch();
  }

  /**
   * Starts batches while an instance is free: live before batch lines, and within each a full
   * one first, else the oldest once past its delay.
   */
  private dispatch(): void {
    if (this.timer !== null) {
      this.clock.clearTimeout(this.timer);
      this.timer = null;
    }
    let wakeAt = Number.POSITIVE_INFINITY;
    while (this.running < Math.max(1, this.options.instances?.() ?? 1)) {
      const next = this.next();
      if (typeof next === 'number') {
        wakeAt = next;
        break;
      }
      void this.execute(next);
    }
    if (wakeAt !== Number.POSITIVE_INFINITY) {
      this.timer = this.clock.setTimeout(() => {
        this.timer = null;
        this.dispatch();
      }, wakeAt - this.clock.now());
    }
  }

  /** The batch to start now (taken out of the waiting ones), or when to look again (Infinity: nothing waits). */
  private next(): Group | number {
    const liveWaiting = this.pending('live') > 0;
    const lanes: Lane[] = liveWaiting || !(this.options.batchMayRun?.() ?? true) ? ['live'] : ['live', 'batch'];
    let wakeAt = Number.POSITIVE_INFINITY;
    for (const lane of lanes) {
      const full = this.full.findIndex((g) => g.lane === lane);
      if (full >= 0) return this.full.splice(full, 1)[0];
      const now = this.clock.now();
      let oldest: Group | undefined;
      for (const g of this.groups.values()) if (g.lane === lane && (!oldest || g.oldest < oldest.oldest)) oldest = g;
      if (!oldest) continue;
      const due = oldest.oldest + this.options.maxDelayMs;
      // Callers whose calls are running on another instance cannot join: count only the others.
      const nobodyElse = this.options.potentialCallers !== undefined && this.options.potentialCallers(lane) - this.inFlight[lane] <= this.pending(lane);
      if (due <= now || nobodyElse) {
        this.groups.delete(oldest.key);
        return oldest;
      }
      wakeAt = Math.min(wakeAt, due);
    }
    return wakeAt;
  }

  private async execute(group: Group): Promise<void> {
    this.running++;
    const { lane } = group;
    this.inFlight[lane] += group.calls.length;
    const started = this.clock.now();
    const calls = group.calls;
    const s = this.stats;
    s.inferences += group.rows;
    s.executions++;
    s.maxCallsPerBatch = Math.max(s.maxCallsPerBatch, calls.length);
    s.callsPerBatch[calls.length] = (s.callsPerBatch[calls.length] ?? 0) + 1;
    for (const c of calls) c.onStart?.();
    try {
      const { outputs, inferMs, wide, lone } = await this.options.execute(concatFeeds(calls.map((c) => c.feeds)), group.lane);
      s.inferMsTotal += inferMs;
      if (wide) s.wide++;
      // A lone run's cost (wide, or narrow with the machine to itself) says nothing about batch
      // sizes under load, where inferences run narrow beside each other.
      if (this.tuner && !wide && !lone) {
        this.tuner.observe(group.rows, inferMs, Math.min(...calls.map((c) => c.rows)));
        s.cap = this.tuner.cap;
        s.costPerRow = this.tuner.snapshot();
      }
      const parts = splitOutputs(outputs, calls.map((c) => c.rows));
      calls.forEach((c, i) => c.resolve({ outputs: parts[i], inferMs: (inferMs * c.rows) / group.rows, execMs: inferMs, waitMs: started - c.at }));
    } catch (err) {
      s.failures++;
      for (const c of calls) c.reject(err);
    } finally {
      this.running--;
      this.inFlight[lane] -= group.calls.length;
      this.dispatch();
    }
  }
}
