// The tenant's code and models, in the user-code process: loads the bundle and models it is
// handed as files, runs setup and warmup, then one handler call per request, batching model
// calls across requests. It holds no platform credential (no Redis, S3 or API key) and reaches
// only its replica, over its channel (runtime/channel/messages.ts); the replica meters and answers.
import { setMaxListeners } from 'node:events';
import { gcPauses, observeGcPauses } from './gc-pauses.ts';
import { pathToFileURL } from 'node:url';
import { z } from 'zod';
import { errorBody } from '../../core/contracts.ts';
import type { Logger } from '../../core/log.ts';
import { ModelSession, type ModelSessionInit } from '../../native/session.ts';
import type { Feeds } from '../../native/tensor.ts';
import { DynamicBatcher, type Lane } from './batcher.ts';
import { LiveFirst } from '../channel/live-first.ts';
import { inferenceResultBody, resultBody, writeTypedArraysAsJson } from './result-body.ts';
import type { InferenceDescriptor } from '../../core/oip/request.ts';
import { inputTensors } from '../../core/oip/tensors.ts';
import { modelFunction } from './model-function.ts';
import { HandlerStreams, isChunkSource, StreamedAnswer } from './handler-stream.ts';
import { CanceledError, errorReply, TimeoutError } from './handler-errors.ts';
import { envView } from '../../core/function-env.ts';
import { isFunctionDefinition, type FunctionDefinition, type HandlerContext, type ModelHandle } from '../../sdk/index.ts';
import { tailedLogger } from './tail-log.ts';
import type { LogCall, StartPhase } from '../../core/log-lines.ts';
import { heldMs, holdCall, newCallTimes, splitTiming, type CallTimes } from '../channel/timing.ts';
import { StartFailure, type AssignMessage, type CallRequest, type FromUserCode, type RunMessage, type UserStats } from '../channel/messages.ts';
import { OutgoingCalls } from './calls.ts';

/** What the user code needs of a loaded model: a ModelSession, or a fake one in tests. */
export type ModelRunner = Pick<ModelSession, 'provider' | 'fallback' | 'instances' | 'lone' | 'inputNames' | 'outputNames' | 'wantsInline' | 'run' | 'noteLone' | 'grow' | 'loadInline' | 'close'>;

interface LoadedModel {
  session: ModelRunner;
  batcher: DynamicBatcher;
}

type Result = Extract<FromUserCode, { type: 'result' }>;

/** A request's result, with the bytes of a binary answer, which go on the byte channel. */
export type RunOutcome = Omit<Result, 'bytes' | 'body' | 'bodyBytes'> & { body: string; bytes?: { contentType: string; data: Buffer; headerLength?: number } };

export interface UserCodeOptions {
  log: Logger;
  /** Run n's handler will not stop after its timeout and grace: the process should be replaced. */
  onStuck: (n: number) => void;
  /** Loads one model. @default ModelSession.create (onnxruntime) */
  openModel?: (init: ModelSessionInit) => Promise<ModelRunner>;
  /** Sends a chunk a handler yielded, for a run that streams (handler-stream.ts). */
  sendChunk?: (n: number, data: string) => void;
  /** Sends a `ctx.log` line of a tailed run (tail-log.ts), or with `phase` one of setup or warmup (n 0). */
  sendLog?: (n: number, call: LogCall, phase?: StartPhase) => void;
  /** Run n got control on this thread (watchdog.ts). */
  markRun?: (n: number) => void;
  /** Where a handler's `ctx.call` goes (its replica; stand-ins in embers/testing), and how one is stopped. */
  sendCall?: (n: number, call: CallRequest) => void;
  abortCall?: (c: number) => void;
  creditCall?: (c: number, k: number) => void;
}

export class UserCode {
  private a!: AssignMessage;
  private def!: FunctionDefinition;
  /** ctx.env: the same frozen object for setup, warmup and every request. */
  private env!: Readonly<Record<string, string | undefined>>;
  private ready = false;
  private closing = false;
  private readyAt = 0;
  private readonly models = new Map<string, LoadedModel>();
  private gate!: LiveFirst;
  /** Requests running now, by lane. */
  private readonly lanes = { live: 0, batch: 0 };
  /** Inferences under way: live requests' and batch lines'. */
  private liveInferring = 0;
  private batchInferring = 0;
  /** Inferences started so far: tells whether another started while a lone one ran. */
  private inferStarts = 0;
  /** Whether the models' other instances were asked to load. */
  private grown = false;
  /** A model's inline sessions are loading (see maybeLoadInline). */
  private loadingInline = false;
  /** Running requests' abort controllers, by their number on the channel. */
  private readonly running = new Map<number, AbortController>();
  private readonly streams: HandlerStreams;
  /** The handlers' calls to other functions, waiting for their answers. */
  readonly calls: OutgoingCalls;

  constructor(private readonly o: UserCodeOptions) {
    observeGcPauses();
    writeTypedArraysAsJson();
    this.streams = new HandlerStreams(o.sendChunk ?? (() => {}), o.markRun);
    this.calls = new OutgoingCalls({
      send: o.sendCall ?? ((_n, call) => this.calls.result(call.c, 501, JSON.stringify(errorBody('calls_unavailable', 'ctx.call needs the platform (or stand-ins in embers/testing)')))),
      abort: o.abortCall ?? (() => {}),
      credit: o.creditCall,
    });
  }

  /** Loads the bundle and models, runs setup and warmup; a failure says its phase (StartFailure). */
  async start(a: AssignMessage): Promise<Extract<FromUserCode, { type: 'started' }>['phases']> {
    this.a = a;
    this.env = envView(a.fn.env);
    if (typeof a.env?.CUDA_VISIBLE_DEVICES === 'string') process.env.CUDA_VISIBLE_DEVICES = a.env.CUDA_VISIBLE_DEVICES;
    const s = a.settings;
    // Its replica, not this process, tells the node when its live requests need the cores.
    this.gate = new LiveFirst({ yieldMs: s.batchYieldMs });
    this.gate.onOpen(() => {
      for (const m of this.models.values()) m.batcher.poke();
    });
    let phase = 'bundle';
    try {
      const tBundle = performance.now();
      const mod = a.fn.kind === 'model' ? { default: modelFunction(a.fn) } : ((await import(pathToFileURL(a.bundlePath).href)) as { default?: unknown });
      if (!isFunctionDefinition(mod.default)) throw new Error('bundle has no default export made with defineFunction()');
      this.def = mod.default;
      const bundleMs = performance.now() - tBundle;

      phase = 'model_load';
      const tLoad = performance.now();
      const entries = Object.entries(a.models);
      // Each session loads on its own thread: in parallel.
      const sessions = await Promise.all(
        entries.map(([name, file]) =>
          (this.o.openModel ?? ModelSession.create)({
            path: file.path,
            providers: s.providers,
            threads: s.threads,
            instances: s.instances,
            wideThreads: s.wideThreads,
            bytes: file.bytes,
            onBackgroundError: (err: Error) => this.o.log.warn({ model: name, err: err.message }, 'could not load an extra session of the model; running with those loaded'),
          }),
        ),
      );
      entries.forEach(([name], i) => {
        const session = sessions[i];
        if (session.fallback) this.o.log.warn({ model: name }, session.fallback);
        const batcher = new DynamicBatcher({
          ...a.fn.batching,
          execute: (feeds, lane) => this.infer(session, feeds, lane),
          instances: () => session.instances,
          potentialCallers: (lane) => this.lanes[lane],
          batchMayRun: () => this.gate.open,
          // On CPU, rows cost about the same alone or batched, and a live request may have to wait
          // for a batch line's inference already running: keep those one call long there.
          batchMaxCalls: session.provider === 'cpu' ? 1 : undefined,
        });
        this.models.set(name, { session, batcher });
      });
      const modelLoadMs = performance.now() - tLoad;

      phase = 'setup';
      const tSetup = performance.now();
      await this.def.setup?.({ models: this.handles(), log: this.startLog('setup'), fn: { name: a.fn.name, version: a.fn.version }, env: this.env });
      const setupMs = performance.now() - tSetup;

      phase = 'warmup';
      const tWarm = performance.now();
      await this.warmup();
      const warmupMs = performance.now() - tWarm;
      this.ready = true;
      this.readyAt = Date.now();
      // The models' other instances load soon, off the cold start's path (see maybeGrow).
      setTimeout(() => this.maybeGrow(), GROW_AFTER_MS).unref();
      return { bundleMs, modelLoadMs, setupMs, warmupMs };
    } catch (err) {
      throw new StartFailure(phase, (err as Error)?.message ?? String(err));
    }
  }

  stats(): UserStats {
    const models: UserStats['models'] = {};
    for (const [name, m] of this.models) models[name] = { provider: m.session.provider, fallback: m.session.fallback, instances: m.session.instances, lone: m.session.lone, ...m.batcher.stats };
    const liveFirst = this.gate ? { ...this.gate.stats, heldMs: Math.round(this.gate.stats.heldMs) } : { yields: 0, heldMs: 0 };
    return { liveFirst, gc: gcPauses(), models };
  }

  /** Whether the node's other replicas run live requests (their replica tells). */
  peers(busy: boolean): void {
    this.gate?.setPeersBusy(busy);
  }

  /** Aborts a running request's signal: `canceled` for a job canceled by its caller, else the replica stopping it. */
  abort(n: number, canceled: boolean): void {
    this.running.get(n)?.abort(canceled ? new CanceledError('canceled') : new Error('stopped by the replica'));
  }

  /** The replica took `k` more of run `n`'s chunks. */
  credit(n: number, k: number): void {
    this.streams.credit(n, k);
  }

  /** Releases the models (a replica that drains). */
  async close(): Promise<void> {
    this.closing = true;
    this.gate?.close();
    await Promise.all([...this.models.values()].map((m) => m.session.close()));
  }

  /**
   * Runs one request: checks its input against the function's schema, calls the handler, encodes
   * its answer. A binary body is in its input field already (user-main.ts puts it there).
   */
  async run(m: RunMessage): Promise<RunOutcome> {
    const t0 = performance.now();
    const times = newCallTimes();
    const lane = m.batch ? 'batch' : 'live';
    this.lanes[lane]++;
    if (lane === 'live') this.gate.liveStarted();
    const ctl = new AbortController();
    this.running.set(m.n, ctl);
    let status = 200;
    let body = '';
    let bytes: RunOutcome['bytes'];
    let streamed: true | undefined;
    // Made on first use: most requests never log.
    let child: Logger | undefined;
    const log = () => (child ??= m.tail ? tailedLogger(this.o.log.child({ rid: m.rid }), (call) => this.o.sendLog?.(m.n, call)) : this.o.log.child({ rid: m.rid }));
    try {
      const request = m.tensors ? (m.input as InferenceDescriptor) : undefined;
      const parsed = (this.def.input as z.ZodType).safeParse(request ? inputTensors(request, request.data ?? EMPTY) : m.input);
      if (!parsed.success) {
        status = 400;
        body = JSON.stringify(errorBody('invalid_input', `input does not match the schema of ${this.a.fn.name}: ${z.prettifyError(parsed.error)}`, parsed.error.issues));
      } else {
        const result = await this.runHandler(parsed.data, m, ctl, times, log);
        const max = this.a.settings.maxAnswerBytes;
        if (result instanceof StreamedAnswer) {
          if (request) throw new Error('a handler serving tensors answers with its outputs, not chunks');
          streamed = true;
          body = result.json ?? 'null';
        } else {
          const encoded = request ? inferenceResultBody(result, request, this.a.fn, max) : resultBody(result, max);
          if (encoded.binary) bytes = { contentType: encoded.binary.contentType, data: encoded.binary.bytes, headerLength: encoded.binary.headerLength };
          else body = encoded.json;
        }
      }
    } catch (err) {
      if (!ctl.signal.aborted || !(ctl.signal.reason instanceof CanceledError)) ({ status, body } = errorReply(err, this.a.fn, log()));
      else log().info('handler stopped: the job was canceled');
    } finally {
      this.lanes[lane]--;
      if (lane === 'live') this.gate.liveEnded();
      this.running.delete(m.n);
      this.calls.endRun(m.n);
      this.maybeGrow();
      this.maybeLoadInline();
    }
    const timing = splitTiming(m.queueMs, t0, performance.now(), times);
    // A handler that stopped because it was canceled ends "canceled", not "failed".
    const canceled = ctl.signal.reason instanceof CanceledError && (status >= 400 || (body === '' && !bytes));
    return { type: 'result', n: m.n, status, body, bytes, timing, canceled: canceled || undefined, streamed };
  }

  /** ctx.log of setup or warmup: its lines also go to the replica, which tails them while the function is tailed. */
  private startLog(phase: StartPhase): Logger {
    const send = this.o.sendLog;
    return send ? tailedLogger(this.o.log.child({ phase }), (call) => send(0, call, phase)) : this.o.log;
  }

  /** Runs the function's warmup input once through the handler, so the first caller pays no first-run costs. */
  private async warmup(): Promise<void> {
    const example = typeof this.def.warmup === 'function' ? await (this.def.warmup as () => unknown)() : this.def.warmup;
    if (example === undefined) return;
    const input = (this.def.input as z.ZodType).parse(example);
    const ctl = new AbortController();
    const noCalls = () => {
      throw new Error('ctx.call and ctx.stream run other functions for requests, not during warmup');
    };
    const out = await this.def.handler(input, { models: this.handles(), log: this.startLog('warmup'), requestId: 'warmup', signal: ctl.signal, fn: { name: this.a.fn.name, version: this.a.fn.version }, env: this.env, call: noCalls, stream: noCalls });
    if (isChunkSource(out)) for await (const _ of out);
  }

  /**
   * Loads the models' other instances (ModelSession.grow) once ready for GROW_AFTER_MS and either
   * idle or holding more than one request: loading takes the cores for a few hundred ms, which
   * the request that waited for the cold start should not share.
   */
  private maybeGrow(): void {
    if (this.grown || !this.ready || this.closing || Date.now() < this.readyAt + GROW_AFTER_MS) return;
    if (this.lanes.live + this.lanes.batch === 1) return;
    this.grown = true;
    for (const m of this.models.values()) m.session.grow(() => m.batcher.poke());
  }

  /**
   * Loads a model's inline sessions (ModelSession.loadInline) once a lone request asked for them. The
   * load holds this process's thread, so it starts only when the process has just gone idle, one
   * model at a time; a request arriving meanwhile waits for it, once per model.
   */
  private maybeLoadInline(): void {
    if (this.loadingInline || !this.ready || this.closing || this.lanes.live + this.lanes.batch > 0) return;
    let model: ModelRunner | undefined;
    for (const m of this.models.values()) if (m.session.wantsInline) model ??= m.session;
    if (!model) return;
    this.loadingInline = true;
    setTimeout(() => {
      const load = this.ready && !this.closing ? model.loadInline() : Promise.resolve();
      void load.finally(() => {
        this.loadingInline = false;
        this.maybeLoadInline();
      });
    }, LOAD_INLINE_AFTER_MS).unref();
  }

  /**
   * The handler's models; a batch line's calls (`lane` batch) yield to live ones. `times` times a
   * request's calls. `signal` (read only once a model is called: an AbortSignal per request
   * costs an echo replica measurable CPU) takes back its calls still waiting for their batch.
   */
  private handles(times: CallTimes = newCallTimes(), lane: Lane = 'live', signal?: () => AbortSignal, n = 0): Record<string, ModelHandle> {
    const out: Record<string, ModelHandle> = {};
    for (const [name, m] of this.models) {
      out[name] = {
        inputNames: m.session.inputNames,
        outputNames: m.session.outputNames,
        run: async (feeds: Feeds) => {
          times.firstAt ??= performance.now();
          times.pending++;
          const started = holdCall(times);
          try {
            const r = await m.batcher.run(feeds, lane, { signal: signal?.(), onStart: started });
            times.inferMs += r.inferMs;
            times.execMs += r.execMs;
            times.batchMs += r.waitMs;
            // The handler's code runs on from here.
            if (n) this.o.markRun?.(n);
            return r.outputs;
          } finally {
            started();
            times.pending--;
            times.lastEndAt = performance.now();
          }
        },
      };
    }
    return out;
  }

  /**
   * One inference. It may run inline (on this thread, wide or narrow: ModelSession's inline sessions)
   * when no other live inference runs, it serves the only live request here, and no other
   * replica on the node announced live requests (live-first.ts). Batch lines never run inline:
   * a live request arriving meanwhile would wait for the whole inference. With batch lines
   * here, a lone live inference runs wide all the same: on this thread it holds off their pre-
   * and post-processing, which would otherwise share the cores with it.
   */
  private async infer(session: ModelRunner, feeds: Feeds, lane: Lane): Promise<{ outputs: Feeds; inferMs: number; wide: boolean; lone: boolean }> {
    // Not during setup and warmup: a replica that never sees a lone request never loads it.
    const lone = lane === 'live' && this.ready && this.liveInferring === 0 && this.lanes.live <= 1 && !this.gate.peersLive;
    if (lane === 'batch') this.batchInferring++;
    else this.liveInferring++;
    const started = ++this.inferStarts;
    try {
      // (A batch line that timed out leaves its lane while its inference runs on: both counted.)
      const batchBeside = () => this.lanes.batch > 0 || this.batchInferring > 0;
      const r = await session.run(feeds, lone, batchBeside());
      // A lone run that another inference or a batch line joined shared the cores: its time says
      // nothing about wide against narrow.
      if (r.timed && this.inferStarts === started && !batchBeside()) session.noteLone(r.timed);
      return r;
    } finally {
      if (lane === 'batch') this.batchInferring--;
      else this.liveInferring--;
    }
  }

  private async runHandler(input: unknown, m: RunMessage, ctl: AbortController, times: CallTimes, log: () => Logger): Promise<unknown> {
    if (m.deadline !== undefined && Date.now() > m.deadline) throw new TimeoutError(`request waited in the queue past its limit (EMBERS_QUEUE_TIMEOUT_MS) before a replica could run it`);
    const { fn, settings } = this.a;
    // A callee's budget ends when its caller needs the answer, if that is sooner.
    const budget = m.endBy === undefined ? fn.timeoutMs : Math.max(1, Math.min(fn.timeoutMs, m.endBy - Date.now()));
    const lane: Lane = m.batch ? 'batch' : 'live';
    const ctx: HandlerContext = {
      models: this.handles(
        times,
        lane,
        () => {
          // One listener per waiting model call: a pipeline may have dozens waiting at once.
          setMaxListeners(0, ctl.signal);
          return ctl.signal;
        },
        m.n,
      ),
      get log() {
        return log();
      },
      requestId: m.rid,
      get signal() {
        return ctl.signal;
      },
      fn: { name: fn.name, version: fn.version },
      env: this.env,
      call: (name, input, o) => this.calls.call(m.n, name, input, o, ctl.signal) as Promise<never>,
      stream: (name, input, o) => this.calls.stream(m.n, name, input, o, ctl.signal) as AsyncIterable<never>,
    };
    let timer: NodeJS.Timeout | undefined;
    let settled = false;
    // A handler that yields is pulled within the same budget (handler-stream.ts).
    const running = Promise.resolve()
      .then(() => {
        this.o.markRun?.(m.n);
        return this.def.handler(input, ctx);
      })
      .then((r) => (isChunkSource(r) ? this.streams.drain(r, m, ctl.signal, settings.maxAnswerBytes) : r));
    void running.then(
      () => (settled = true),
      () => (settled = true),
    );
    // A batch line's budget leaves out the time its model calls waited for their batch: held back
    // while live requests run (live-first.ts), it is not running. A live request's budget is its
    // caller's wait, so all of it counts.
    const began = performance.now();
    const timeout = new Promise<never>((_, reject) => {
      const expire = () => {
        const used = performance.now() - began - (lane === 'batch' ? heldMs(times, performance.now()) : 0);
        if (used < budget) {
          timer = setTimeout(expire, Math.max(50, budget - used));
          return;
        }
        // Its calls still waiting for their batch are taken back (they reject with this reason).
        ctl.abort(new TimeoutError(`handler ran past ${budget} ms`));
        reject(new TimeoutError(`${fn.name} did not finish within ${budget} ms${budget < fn.timeoutMs ? ' (what its caller had left)' : ''}`));
        // A handler that ignores its signal holds a slot (and maybe a core) forever: replace the replica.
        setTimeout(() => {
          if (!settled) this.o.onStuck(m.n);
        }, settings.handlerGraceMs).unref();
      };
      timer = setTimeout(expire, budget);
    });
    try {
      return await Promise.race([running, timeout]);
    } finally {
      clearTimeout(timer);
    }
  }
}

const EMPTY = new Uint8Array(0);

/** How long after it is ready the process waits before loading its models' other instances. */
const GROW_AFTER_MS = 1000;
/** After the process goes idle, its inline sessions may load (maybeLoadInline). */
const LOAD_INLINE_AFTER_MS = 5;
