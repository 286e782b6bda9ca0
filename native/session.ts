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

/**
 * A model's session on a worker thread, and on CPU optionally a second one with more intra-op
 * threads (`wideThreads`) for an inference that has the machine to itself: one request alone
 * runs on every core, while under load each inference keeps to `threads` and the cores go to
 * concurrent inferences instead. The wide session is loaded on its own thread after the first
 * is ready, so it adds nothing to a cold start; until then every inference runs narrow.
 */
export class ModelSession {
  private wide?: SessionWorker;
  private closed = false;

  private constructor(
    private readonly narrow: SessionWorker,
    readonly inputNames: string[],
    readonly outputNames: string[],
    /** The provider actually in use, and why it differs from the request, if it does. */
    readonly provider: string,
    readonly fallback?: string,
  ) {}

  static async create(init: SessionInit & { wideThreads?: number; onWideError?: (err: Error) => void }): Promise<ModelSession> {
    const { wideThreads = 0, onWideError, ...plain } = init;
    const narrow = await SessionWorker.create(plain);
    const { ready } = narrow;
    const session = new ModelSession(narrow, ready.inputNames, ready.outputNames, ready.provider, ready.fallback);
    if (ready.provider === 'cpu' && wideThreads > plain.threads) {
      void SessionWorker.create({ ...plain, providers: ['cpu'], threads: wideThreads }).then(
        (w) => {
          if (session.closed) void w.close();
          else session.wide = w;
        },
        (err: Error) => onWideError?.(err),
      );
    }
    return session;
  }

  /** Whether a wide session is loaded (inferences asked to run wide can). */
  get hasWide(): boolean {
    return this.wide !== undefined && !this.wide.dead;
  }

  /**
   * Runs one (already batched) inference; `wide` asks for the session with more threads, used
   * when it is loaded and idle. The feeds' buffers are transferred: do not reuse them.
   */
  async run(feeds: Feeds, wide = false): Promise<{ outputs: Feeds; inferMs: number; wide: boolean }> {
    const w = this.wide;
    if (wide && w && !w.dead && w.busy === 0) return { ...(await w.run(feeds)), wide: true };
    return { ...(await this.narrow.run(feeds)), wide: false };
  }

  async close(): Promise<void> {
    this.closed = true;
    await Promise.all([this.narrow.close(), this.wide?.close()]);
  }
}
