// A model's sessions: on worker threads (inputs and outputs cross by transfer, not copy), and
// one on the replica's own thread for a lone request.
import { Worker } from 'node:worker_threads';
import type ort from 'onnxruntime-node';
import { LoneChooser, type LoneSide } from './lone-chooser.ts';
import { runSession, sessionOptions } from './ort-session.ts';
import { elementCount, isTyped, type Feeds } from './tensor.ts';

export type ExecutionProvider = 'cpu' | 'cuda' | 'tensorrt';

export interface SessionInit {
  path: string;
  providers: ExecutionProvider[];
  threads: number;
}

export type WorkerRequest = { id: number; feeds: Feeds };
export type WorkerReply =
  | { type: 'ready'; inputNames: string[]; outputNames: string[]; provider: string; fallback?: string }
  | { type: 'failed'; message: string }
  | { type: 'result'; id: number; outputs: Feeds; inferMs: number }
  | { type: 'error'; id: number; message: string };

// From source (tsx), the worker boots tsx first; from the prebuilt runtime, it is plain JS.
const FROM_SOURCE = import.meta.url.endsWith('.ts');
const BOOT = FROM_SOURCE ? new URL('./worker-boot.mjs', import.meta.url) : new URL('./session-worker.mjs', import.meta.url);
const ENTRY = new URL(FROM_SOURCE ? './session-worker.ts' : './session-worker.mjs', import.meta.url).href;

/** One session on one worker thread. */
class SessionWorker {
  private nextId = 1;
  private readonly waiting = new Map<number, { resolve: (r: { outputs: Feeds; inferMs: number }) => void; reject: (e: Error) => void }>();
  dead: Error | null = null;

  private constructor(
    private readonly worker: Worker,
    readonly ready: Extract<WorkerReply, { type: 'ready' }>,
  ) {
    worker.on('message', (m: WorkerReply) => {
      if (m.type !== 'result' && m.type !== 'error') return;
      const w = this.waiting.get(m.id);
      this.waiting.delete(m.id);
      if (m.type === 'result') w?.resolve({ outputs: m.outputs, inferMs: m.inferMs });
      else w?.reject(new Error(`inference failed: ${m.message}`));
    });
    const die = (err: Error) => {
      this.dead = err;
      for (const w of this.waiting.values()) w.reject(err);
      this.waiting.clear();
    };
    worker.on('error', die);
    worker.on('exit', (code) => die(new Error(`model worker exited (code ${code})`)));
  }

  static async create(init: SessionInit): Promise<SessionWorker> {
    const worker = new Worker(BOOT, { workerData: { entry: ENTRY, init } });
    // Remove only our own listeners: Worker keeps internal ones (ref/unref of its port).
    let onMessage!: (m: WorkerReply) => void;
    let onError!: (e: Error) => void;
    let onExit!: (code: number) => void;
    const ready = await new Promise<Extract<WorkerReply, { type: 'ready' }>>((resolve, reject) => {
      onMessage = (m) => {
        if (m.type === 'ready') resolve(m);
        else if (m.type === 'failed') reject(new Error(`cannot load model ${init.path}: ${m.message}`));
      };
      onError = reject;
      onExit = (code) => reject(new Error(`model worker exited during load (code ${code})`));
      worker.on('message', onMessage).on('error', onError).on('exit', onExit);
    }).finally(() => worker.off('message', onMessage).off('error', onError).off('exit', onExit));
    return new SessionWorker(worker, ready);
  }

  /** Inferences sent and not answered yet. */
  get busy(): number {
    return this.waiting.size;
  }

  /** Inferences asked of this session so far. */
  get runs(): number {
    return this.nextId - 1;
  }

  run(feeds: Feeds): Promise<{ outputs: Feeds; inferMs: number }> {
    if (this.dead) return Promise.reject(this.dead);
    const id = this.nextId++;
    const transfer = new Set<ArrayBuffer>();
    for (const t of Object.values(feeds)) if (isTyped(t.data) && t.data.byteOffset === 0 && t.data.byteLength === t.data.buffer.byteLength) transfer.add(t.data.buffer as ArrayBuffer);
    return new Promise((resolve, reject) => {
      this.waiting.set(id, { resolve, reject });
      this.worker.postMessage({ id, feeds } satisfies WorkerRequest, [...transfer]);
    });
  }

  async close(): Promise<void> {
    await this.worker.terminate();
  }
}

export interface ModelSessionInit extends SessionInit {
  /** On CPU, sessions that may run at once (each on its own thread with `threads`). @default 1 */
  instances?: number;
  /** On CPU, intra-op threads of the inline session a lone inference may use (0 or ≤ threads: none). */
  wideThreads?: number;
  /** The model file's size: a model over INLINE_MAX_BYTES gets no inline session. */
  bytes?: number;
  /** A session loaded in the background (an extra instance, the inline one) failed to load. */
  onBackgroundError?: (err: Error) => void;
}

/**
 * Largest model that gets an inline session. Loading one holds the replica's thread (about
 * 10 ms per MB measured here: PaddleOCR det 4.7 MB 73 ms, rec 10.8 MB 94 ms), so a bigger model
 * would stall its replica for more than about half a second.
 */
export const INLINE_MAX_BYTES = 64 * 2 ** 20;

/**
 * Runs of a session that the lone chooser does not learn from. A freshly loaded session's first
 * runs pay for its memory arena and kernels warming up: the ocr models in-process here took
 * 2–3× a warm run's time for their first 2–3 runs on one thread and 1.5–2× for the recogniser's
 * first 4 on two spinning threads. The inline session loads after the first lone request, so
 * its first runs were the chooser's first wide samples: in replicas at c = 1 it measured the
 * recogniser wide at 1,529 against 386 narrow (ms per million input values) after 32 requests,
 * kept lone runs narrow (wide 4 of 97 runs), and only moved back once its explorations (one lone
 * run in 32) had replaced those samples (wide 193 against 447 narrow, later in another run).
 */
export const SESSION_WARM_RUNS = 4;

/** A session on the replica's own thread: no thread hop, but it holds that thread while it runs. */
class InlineSession {
  busy = false;
  /** Inferences asked of this session so far. */
  runs = 0;

  private constructor(
    private readonly session: ort.InferenceSession,
    private readonly Tensor: typeof ort.Tensor,
  ) {}

  /** Holds the calling thread while the model loads (onnxruntime-node loads synchronously). */
  static async create(path: string, threads: number): Promise<InlineSession> {
    // Named exports: how tsx and Node hand out this CommonJS module's default differs.
    const { InferenceSession, Tensor } = await import('onnxruntime-node');
    // It runs only for a replica's only live inference (a batch line's inference already under
    // way may finish beside it), so its threads may spin while it runs (not after). On a 2-vCPU VM, the ocr pipeline in-process in blocks of 6, taking turns: 36.9 ms
    // p50 on 2 threads spinning while running, 40.6 on 1 thread, 45.0 on 2 not spinning, 66.4 on
    // 2 spinning on after each run. In replicas at c = 1, 30 rounds of blocks of 8: the lone
    // recogniser's cost 276 (wide) against 416 (narrow) ms per million input values spinning,
    // 415 against 428 not; the request's p50 6.7 ms lower (median of rounds; lower in 26 of 30).
    return new InlineSession(await InferenceSession.create(path, sessionOptions(['cpu'], threads, true)), Tensor);
  }

  async run(feeds: Feeds): Promise<{ outputs: Feeds; inferMs: number }> {
    this.busy = true;
    this.runs++;
    try {
      return await runSession(this.session, this.Tensor, feeds);
    } finally {
      this.busy = false;
    }
  }

  close(): Promise<void> {
    return this.session.release();
  }
}

/**
 * A model's sessions: Triton's instance group on worker threads, plus on CPU two inline ones.
 * - `instances` narrow sessions, each on a worker thread with `threads` intra-op threads, let
 *   inferences of concurrent requests run side by side (a single session runs one inference at
 *   a time: with two models of unequal cost in a pipeline, the costlier one alone would hold the
 *   replica to one core).
 * - The inline sessions run on the caller's thread (the replica's), one with `wideThreads`
 *   intra-op threads (wide) and one with `threads` (narrow): they serve the replica's only live
 *   inference (the caller says so; a batch line's inference already under way may finish beside
 *   it), so a lone request skips the two thread hops of a worker (~0.3 ms together on these VMs
 *   when the other thread sleeps: a quarter of a light model's inference) and runs on every core
 *   or on one, as the chooser (LoneChooser) measured cheaper. They hold the replica's thread
 *   while they run, which is why only a lone request may use them.
 * Only the first narrow session is loaded before the replica is ready; the other instances load
 * once it is (grow()). The inline sessions are only marked wanted when a lone inference first
 * asks for them; the caller loads them (loadInline()) at a moment its thread is free, since loading
 * holds that thread too. Until loaded, their work runs on the first narrow session. Inline
 * sessions that fail to load are not tried again (the model is likely too big for more copies).
 */
export class ModelSession {
  private readonly narrow: SessionWorker[];
  /** The inline sessions: every core, and `threads` (a lone run's narrow side, without the worker's hops). */
  private inline?: { wide: InlineSession; narrow: InlineSession };
  /** 'wanted' once a lone inference asked for them; 'done' once loadInline() ran (a failed load is not tried again: likely short of memory). */
  private inlineState: 'idle' | 'wanted' | 'done' = 'idle';
  private grown = false;
  private closed = false;
  private readonly chooser = new LoneChooser();

  private constructor(
    first: SessionWorker,
    private readonly init: ModelSessionInit,
    readonly inputNames: string[],
    readonly outputNames: string[],
    /** The provider actually in use, and why it differs from the request, if it does. */
    readonly provider: string,
    readonly fallback?: string,
  ) {
    this.narrow = [first];
  }

  /** Loads the first narrow session; the other instances load on grow(). */
  static async create(init: ModelSessionInit): Promise<ModelSession> {
    const first = await SessionWorker.create(plainInit(init, init.threads, init.providers));
    const { ready } = first;
    return new ModelSession(first, init, ready.inputNames, ready.outputNames, ready.provider, ready.fallback);
  }

  /**
   * Loads the other instances in the background (once the replica is ready, so they do not
   * compete with its cold start); `loaded` is called as each one can take work.
   */
  grow(loaded?: () => void): void {
    if (this.grown || this.provider !== 'cpu') return;
    this.grown = true;
    for (let i = 1; i < (this.init.instances ?? 1); i++) {
      SessionWorker.create(plainInit(this.init, this.init.threads, ['cpu'])).then(
        (w) => {
          if (this.closed) return void w.close();
          this.narrow.push(w);
          loaded?.();
        },
        (err: Error) => this.init.onBackgroundError?.(err),
      );
    }
  }

  /** Narrow sessions loaded and alive: how many inferences may run at once. */
  get instances(): number {
    let n = 0;
    for (const w of this.narrow) if (!w.dead) n++;
    return n;
  }

  /** Whether this model may have an inline session: on CPU, wider than the narrow ones, and not too big. */
  private get inlineAllowed(): boolean {
    return this.provider === 'cpu' && (this.init.wideThreads ?? 0) > this.init.threads && (this.init.bytes ?? 0) <= INLINE_MAX_BYTES;
  }

  /** Whether the inline sessions are loaded. */
  get hasInline(): boolean {
    return this.inline !== undefined;
  }

  /** Whether a lone inference asked for the inline sessions and they are not loaded yet: call loadInline() when the thread is free. */
  get wantsInline(): boolean {
    return this.inlineState === 'wanted';
  }

  /**
   * Loads the inline sessions. It holds the calling thread for the load (about 10 ms per MB and
   * session): call it when nothing else needs that thread.
   */
  async loadInline(): Promise<void> {
    if (this.inlineState !== 'wanted' || this.closed) return;
    this.inlineState = 'done';
    const loaded: InlineSession[] = [];
    try {
      loaded.push(await InlineSession.create(this.init.path, this.init.wideThreads!));
      loaded.push(await InlineSession.create(this.init.path, this.init.threads));
      if (this.closed) return void (await Promise.all(loaded.map((s) => s.close())));
      this.inline = { wide: loaded[0], narrow: loaded[1] };
    } catch (err) {
      await Promise.all(loaded.map((s) => s.close()));
      this.init.onBackgroundError?.(err as Error);
    }
  }

  /**
   * Runs one (already batched) inference; `lone` says it is the replica's only live one and may run
   * on an inline session when those are loaded and free (the first such ask marks them wanted).
   * Once they are loaded, a lone run goes wide or narrow as the chooser has measured to be faster
   * (LoneChooser), and comes back `timed`: pass that to noteLone() if nothing else ran beside it.
   * `pinWide`: run it wide without asking the chooser (the caller has other work for its thread
   * that a wide run holds off, as it should).
   * `lone` in the result: it had the replica to itself where a wide session was possible (a
   * GPU's runs are costs under load all the same). The feeds' buffers may be transferred to a
   * worker: do not reuse them.
   */
  async run(feeds: Feeds, lone = false, pinWide = false): Promise<{ outputs: Feeds; inferMs: number; wide: boolean; lone: boolean; timed?: LoneTiming }> {
    if (lone && this.inlineAllowed) {
      const inline = this.inline;
      if (inline && !inline.wide.busy && !inline.narrow.busy) {
        if (pinWide) return { ...(await inline.wide.run(feeds)), wide: true, lone: true };
        const side = this.chooser.choose();
        const session = inline[side];
        // A session's first runs are not timed: they would teach the chooser that a side just
        // loaded is slow (see SESSION_WARM_RUNS), and it would keep lone runs off it for ~100 more.
        const warm = session.runs >= SESSION_WARM_RUNS;
        // Counted before the run: a worker takes the buffers.
        const values = feedValues(feeds);
        const t0 = performance.now();
        const r = await session.run(feeds);
        return { ...r, wide: side === 'wide', lone: true, ...(warm ? { timed: { side, cost: ((performance.now() - t0) * 1e6) / Math.max(1, values) } } : {}) };
      }
      if (this.inlineState === 'idle') this.inlineState = 'wanted';
      return { ...(await this.leastBusy().run(feeds)), wide: false, lone: true };
    }
    return { ...(await this.leastBusy().run(feeds)), wide: false, lone: false };
  }

  /** Teaches the chooser a lone run's cost (from run()), when no other inference ran beside it. */
  noteLone(timed: LoneTiming): void {
    this.chooser.observe(timed.side, timed.cost);
  }

  /** The least busy live narrow session (all dead: the first, which rejects with why). */
  private leastBusy(): SessionWorker {
    let pick: SessionWorker | undefined;
    for (const w of this.narrow) if (!w.dead && (!pick || w.busy < pick.busy)) pick = w;
    return pick ?? this.narrow[0];
  }

  /** Where lone runs go and what each side costs (medians, ms per million input values), once the inline sessions are loaded. */
  get lone(): LoneChooser['stats'] | undefined {
    return this.inline ? this.chooser.stats : undefined;
  }

  async close(): Promise<void> {
    this.closed = true;
    await Promise.all([...this.narrow.map((w) => w.close()), this.inline?.wide.close(), this.inline?.narrow.close()]);
  }
}

/**
 * A lone run's side and cost: ms per million input values, hops included, so inputs of different
 * sizes (an image's, a recogniser batch's rows and widths) compare.
 */
export interface LoneTiming {
  side: LoneSide;
  cost: number;
}

/** Values across the feeds. */
function feedValues(feeds: Feeds): number {
  let n = 0;
  for (const t of Object.values(feeds)) n += elementCount(t.dims);
  return n;
}

/** What a worker thread is given: plain data only (workerData is cloned). */
function plainInit(init: ModelSessionInit, threads: number, providers: ExecutionProvider[]): SessionInit {
  return { path: init.path, providers, threads };
}
