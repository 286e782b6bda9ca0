// A model session living on a worker thread. Inputs and outputs cross by transfer, not copy.
import { Worker } from 'node:worker_threads';
import type { Feeds } from './tensor.ts';

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

  run(feeds: Feeds): Promise<{ outputs: Feeds; inferMs: number }> {
    if (this.dead) return Promise.reject(this.dead);
    const id = this.nextId++;
    const transfer = new Set<ArrayBuffer>();
    for (const t of Object.values(feeds)) if (t.data.byteOffset === 0 && t.data.byteLength === t.data.buffer.byteLength) transfer.add(t.data.buffer as ArrayBuffer);
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
  /** On CPU, intra-op threads of the wide session a lone inference may use (0 or ≤ threads: none). */
  wideThreads?: number;
  /** A session loaded in the background (an extra instance, the wide one) failed to load. */
  onBackgroundError?: (err: Error) => void;
}

/**
 * A model's sessions, each on a worker thread: Triton's instance group, plus on CPU a wide one.
 * - `instances` narrow sessions let inferences of concurrent requests run side by side, one
 *   thread each (a single session runs one inference at a time: with two models of unequal cost
 *   in a pipeline, the costlier one alone would hold the replica to one core).
 * - The wide session has `wideThreads` intra-op threads and serves an inference that has the
 *   replica to itself (the caller says so): one request alone runs on every core.
 * Only the first narrow session is loaded before the replica is ready; the other instances load
 * once it is (grow()), and the wide session when first asked for, so neither adds to a cold
 * start, and a replica under steady load never loads the wide one. Until loaded, their work
 * runs on the first. A wide session that fails to load is not tried again (the model is likely
 * too big for another copy); one whose thread dies is replaced when next asked for.
 */
export class ModelSession {
  private readonly narrow: SessionWorker[];
  private wide?: SessionWorker;
  /** 'idle' until first asked for; 'failed' after a failed load (not tried again: likely short of memory). */
  private wideState: 'idle' | 'loading' | 'loaded' | 'failed' = 'idle';
  private grown = false;
  private closed = false;

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
      this.load(this.init.threads, (w) => {
        this.narrow.push(w);
        loaded?.();
      });
    }
  }

  private load(threads: number, keep: (w: SessionWorker) => void, failed?: () => void): void {
    SessionWorker.create(plainInit(this.init, threads, ['cpu'])).then(
      (w) => {
        if (this.closed) void w.close();
        else keep(w);
      },
      (err: Error) => {
        failed?.();
        this.init.onBackgroundError?.(err);
      },
    );
  }

  /** Narrow sessions loaded and alive: how many inferences may run at once. */
  get instances(): number {
    let n = 0;
    for (const w of this.narrow) if (!w.dead) n++;
    return n;
  }

  /** Whether the wide session is loaded. */
  get hasWide(): boolean {
    return this.wide !== undefined && !this.wide.dead;
  }

  /**
   * Runs one (already batched) inference; `wide` asks for the wide session, used when it is
   * loaded and idle (the first ask loads it). The feeds' buffers are transferred: do not reuse them.
   */
  async run(feeds: Feeds, wide = false): Promise<{ outputs: Feeds; inferMs: number; wide: boolean }> {
    if (wide && this.provider === 'cpu' && (this.init.wideThreads ?? 0) > this.init.threads) {
      const w = this.wide;
      if (w?.dead) {
        // Its thread died: load another when next asked (an inference it held failed with it).
        this.wide = undefined;
        this.wideState = 'idle';
      } else if (w && w.busy === 0) {
        return { ...(await w.run(feeds)), wide: true };
      }
      if (this.wideState === 'idle') {
        this.wideState = 'loading';
        this.load(
          this.init.wideThreads!,
          (loaded) => {
            this.wide = loaded;
            this.wideState = 'loaded';
          },
          () => (this.wideState = 'failed'),
        );
      }
    }
    // The least busy live one (all dead: the first, which rejects with why).
    let pick: SessionWorker | undefined;
    for (const w of this.narrow) if (!w.dead && (!pick || w.busy < pick.busy)) pick = w;
    return { ...(await (pick ?? this.narrow[0]).run(feeds)), wide: false };
  }

  async close(): Promise<void> {
    this.closed = true;
    await Promise.all([...this.narrow.map((w) => w.close()), this.wide?.close()]);
  }
}

/** What a worker thread is given: plain data only (workerData is cloned). */
function plainInit(init: ModelSessionInit, threads: number, providers: ExecutionProvider[]): SessionInit {
  return { path: init.path, providers, threads };
}
