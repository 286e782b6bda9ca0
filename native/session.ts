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

export class ModelSession {
  private nextId = 1;
  private readonly waiting = new Map<number, { resolve: (r: { outputs: Feeds; inferMs: number }) => void; reject: (e: Error) => void }>();
  private dead: Error | null = null;

  private constructor(
    private readonly worker: Worker,
    readonly inputNames: string[],
    readonly outputNames: string[],
    /** The provider actually in use, and why it differs from the request, if it does. */
    readonly provider: string,
    readonly fallback?: string,
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

  static async create(init: SessionInit): Promise<ModelSession> {
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
    return new ModelSession(worker, ready.inputNames, ready.outputNames, ready.provider, ready.fallback);
  }

  /** Runs one (already batched) inference. The feeds' buffers are transferred: do not reuse them. */
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
