// `ocr` composed from two functions, for the bench's composition section (bench/split.ts): a thin
// handler that calls `ocr-det` for the text boxes, then `ocr-rec` for their readings, each queued,
// scaled and batched as a function of its own, and answers `ocr`'s JSON. It takes the image as
// `ocr` does (base64 in JSON, or the file itself as the body) and decodes nothing itself.
import { bytes, defineFunction } from 'embers';
import { z } from 'zod';
import { textLines } from '../../functions/ocr/postprocess.ts';
import type OcrDet from './ocr-det.ts';
import type OcrRec from './ocr-rec.ts';

export default defineFunction({
  name: 'ocr-split',
  input: z.object({ image: z.union([z.string().min(1), bytes()]) }),
  binaryInput: 'image',
  timeoutMs: 30_000,
  async handler({ image }, ctx) {
    // Calls carry JSON: a file sent as the body goes on as base64.
    const image64 = typeof image === 'string' ? image : Buffer.from(image).toString('base64');
    const { boxes } = await ctx.call<typeof OcrDet>('ocr-det', { image: image64 });
    if (boxes.length === 0) return { lines: [] };
    // One rec call for every box, not one per line in parallel: rec batches rows across requests on its own, so more calls would add a hop (and a copy of the image) each and batch nothing more.
    const { readings } = await ctx.call<typeof OcrRec>('ocr-rec', { image: image64, boxes });
    return { lines: textLines(boxes, readings) };
  },
});
