// Image → tensor data for PaddleOCR v4 det and rec. sharp decodes and resizes for det; crops
// for rec are sampled here, since text boxes may be tilted; normalising and packing are plain
// loops over arrays.
import sharp from 'sharp';
import { quadSize, sub, type Point, type Quad } from './postprocess.ts';

/** 8-bit pixels, 3 interleaved channels in R,G,B order, row-major. */
export interface RgbImage {
  readonly data: Uint8Array;
  readonly width: number;
  readonly height: number;
}

/** The longest side det sees (PaddleOCR DetResizeForTest, limit_type 'max'). */
export const DET_MAX_SIDE = 960;
/** Rec input height the v4 rec model was trained with. */
export const REC_HEIGHT = 48;
/** Fixed rec widths, so crops of similar length from different requests batch together. */
export const REC_BUCKETS: readonly number[] = [160, 320, 480, 640, 960, 1280];

// PaddleOCR decodes with OpenCV, so its models were trained on B,G,R planes; the det mean/std
// lists apply in that plane order. Plane p takes RGB channel BGR[p].
const BGR = [2, 1, 0] as const;
const DET_MEAN = [0.485, 0.456, 0.406] as const;
const DET_STD = [0.229, 0.224, 0.225] as const;

/**
 * The image format from its first bytes: PNG and JPEG are accepted; a few others are named so
 * the caller learns what was sent. Reading the signature here saves a sharp call (its metadata
 * step, a trip to libuv's threads and back: ~1 ms of a request at c = 1 on 2-core VMs).
 */
export function sniffFormat(b: Uint8Array): string {
  const starts = (...sig: number[]) => sig.every((v, i) => b[i] === v);
  if (starts(0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a)) return 'png';
  if (starts(0xff, 0xd8, 0xff)) return 'jpeg';
  if (starts(0x47, 0x49, 0x46, 0x38)) return 'gif';
  if (starts(0x52, 0x49, 0x46, 0x46) && b[8] === 0x57 && b[9] === 0x45 && b[10] === 0x42 && b[11] === 0x50) return 'webp';
  if (starts(0x49, 0x49, 0x2a, 0x00) || starts(0x4d, 0x4d, 0x00, 0x2a)) return 'tiff';
  if (starts(0x42, 0x4d)) return 'bmp';
  const head = Buffer.from(b.subarray(0, 256)).toString('utf8').trimStart();
  if (head.startsWith('<')) return 'svg or other markup';
  return 'unknown';
}

/** Bytes of a base64 string, with or without a `data:…;base64,` prefix. */
export function base64Bytes(image: string): Uint8Array {
  const payload = image.startsWith('data:') ? image.slice(image.indexOf(',') + 1) : image;
  return Buffer.from(payload.trim(), 'base64');
}

/**
 * Decodes a PNG or JPEG into RGB pixels: EXIF orientation applied (boxes then match what a
 * viewer shows), transparency composited on white (removing alpha alone turns transparent
 * backgrounds black), grey images expanded to 3 channels. Throws on anything else, SVG included.
 */
export async function decodeImage(bytes: Uint8Array): Promise<RgbImage> {
  const format = sniffFormat(bytes);
  if (format !== 'png' && format !== 'jpeg') throw new Error(`format is ${format}`);
  const { data, info } = await sharp(bytes)
    .autoOrient()
    .flatten({ background: '#ffffff' })
    .removeAlpha()
    .toColourspace('srgb')
    .raw()
    .toBuffer({ resolveWithObject: true });
  if (info.channels !== 3) throw new Error(`decoded to ${info.channels} channels`);
  return { data: new Uint8Array(data.buffer, data.byteOffset, data.length), width: info.width, height: info.height };
}

/** Det input size: longer side at most maxSide, both sides multiples of 32 (the net downsamples 32×). */
export function detSize(width: number, height: number, maxSide = DET_MAX_SIDE): { width: number; height: number } {
  const ratio = Math.min(1, maxSide / Math.max(width, height));
  const to32 = (n: number): number => Math.max(32, Math.round((n * ratio) / 32) * 32);
  return { width: to32(width), height: to32(height) };
}

/** Stretches (no letterbox) an image to exactly width × height. */
export async function resizeImage(image: RgbImage, width: number, height: number): Promise<RgbImage> {
  if (image.width === width && image.height === height) return image;
  const data = await sharp(image.data, { raw: { width: image.width, height: image.height, channels: 3 } })
    .resize(width, height, { fit: 'fill' })
    .raw()
    .toBuffer();
  return { data: new Uint8Array(data.buffer, data.byteOffset, data.length), width, height };
}

/** CHW float planes for det: (x/255 - mean) / std per plane, B,G,R plane order. */
export function detInput(image: RgbImage): Float32Array {
  const plane = image.width * image.height;
  const out = new Float32Array(3 * plane);
  for (let p = 0; p < 3; p++) {
    const ch = BGR[p];
    const scale = 1 / (255 * DET_STD[p]);
    const shift = DET_MEAN[p] / DET_STD[p];
    for (let i = 0; i < plane; i++) out[p * plane + i] = image.data[i * 3 + ch] * scale - shift;
  }
  return out;
}

/** Width a crop gets at rec height, aspect kept, capped at the widest bucket. */
export function recWidth(cropWidth: number, cropHeight: number): number {
  const width = Math.ceil((REC_HEIGHT * cropWidth) / Math.max(1, cropHeight));
  return Math.min(REC_BUCKETS[REC_BUCKETS.length - 1], Math.max(1, width));
}

/** Smallest bucket a rec-height crop of this width fits in. */
export function recBucket(width: number): number {
  return REC_BUCKETS.find((b) => b >= width) ?? REC_BUCKETS[REC_BUCKETS.length - 1];
}

/**
 * Cuts a (possibly tilted) quad out of image, straightened and scaled to rec height. Crops at
 * least 1.5× taller than wide are turned 90° counter-clockwise, as PaddleOCR does for vertical
 * text.
 */
export function cropForRec(image: RgbImage, quad: Quad): RgbImage {
  const [tl, tr, br, bl] = quad;
  const { width, height } = quadSize(quad);
  const vertical = height >= 1.5 * width;
  // Output x runs along `across`, output y along `down`, from `origin`. Turned 90° CCW, the
  // top-right corner becomes the origin and the old right edge the new top.
  const [origin, across, down] = vertical ? [tr, sub(br, tr), sub(tl, tr)] : [tl, sub(tr, tl), sub(bl, tl)];
  const outWidth = vertical ? recWidth(height, width) : recWidth(width, height);
  return sampleParallelogram(image, origin, across, down, outWidth, REC_HEIGHT);
}

/**
 * Resamples the parallelogram origin + s·across + t·down (s, t in [0, 1]) to outWidth ×
 * outHeight: bilinear, edges replicated (as PaddleOCR's BORDER_REPLICATE), with up to 4×4
 * samples per output pixel when shrinking so large text does not alias.
 */
export function sampleParallelogram(
  image: RgbImage,
  origin: Point,
  across: Point,
  down: Point,
  outWidth: number,
  outHeight: number,
): RgbImage {
  const { data, width, height } = image;
  const k = clamp(Math.ceil(Math.max(Math.hypot(...across) / outWidth, Math.hypot(...down) / outHeight)), 1, 4);
  const out = new Uint8Array(outWidth * outHeight * 3);
  const acc = [0, 0, 0];
  for (let oy = 0; oy < outHeight; oy++) {
    for (let ox = 0; ox < outWidth; ox++) {
      acc[0] = acc[1] = acc[2] = 0;
      for (let j = 0; j < k; j++) {
        const t = (oy + (j + 0.5) / k) / outHeight;
        for (let i = 0; i < k; i++) {
          const s = (ox + (i + 0.5) / k) / outWidth;
          // Pixel centres sit at +0.5.
          const x = clamp(origin[0] + s * across[0] + t * down[0] - 0.5, 0, width - 1);
          const y = clamp(origin[1] + s * across[1] + t * down[1] - 0.5, 0, height - 1);
          const x0 = Math.floor(x), y0 = Math.floor(y);
          const x1 = Math.min(x0 + 1, width - 1), y1 = Math.min(y0 + 1, height - 1);
          const fx = x - x0, fy = y - y0;
          const p00 = (y0 * width + x0) * 3, p10 = (y0 * width + x1) * 3;
          const p01 = (y1 * width + x0) * 3, p11 = (y1 * width + x1) * 3;
          for (let c = 0; c < 3; c++) {
            const top = data[p00 + c] + (data[p10 + c] - data[p00 + c]) * fx;
            const bottom = data[p01 + c] + (data[p11 + c] - data[p01 + c]) * fx;
            acc[c] += top + (bottom - top) * fy;
          }
        }
      }
      const o = (oy * outWidth + ox) * 3;
      for (let c = 0; c < 3; c++) out[o + c] = Math.round(acc[c] / (k * k));
    }
  }
  return { data: out, width: outWidth, height: outHeight };
}

/**
 * Packs rec-height crops into one [n, 3, 48, bucket] batch: (x/255 - 0.5) / 0.5 per pixel,
 * B,G,R planes, right-padded with zeros (PaddleOCR pads after normalising).
 */
export function recInput(crops: readonly RgbImage[], bucket: number): Float32Array {
  const plane = REC_HEIGHT * bucket;
  const out = new Float32Array(crops.length * 3 * plane);
  crops.forEach((crop, n) => {
    if (crop.height !== REC_HEIGHT || crop.width > bucket) {
      throw new RangeError(`crop ${crop.width}x${crop.height} does not fit ${bucket}x${REC_HEIGHT}`);
    }
    for (let p = 0; p < 3; p++) {
      const ch = BGR[p];
      const base = (n * 3 + p) * plane;
      for (let y = 0; y < REC_HEIGHT; y++) {
        for (let x = 0; x < crop.width; x++) {
          out[base + y * bucket + x] = crop.data[(y * crop.width + x) * 3 + ch] / 127.5 - 1;
        }
      }
    }
  });
  return out;
}

function clamp(v: number, lo: number, hi: number): number {
  return Math.min(hi, Math.max(lo, v));
}
