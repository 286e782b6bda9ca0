// Model outputs → text lines: DB post-processing of the det probability map, CTC greedy
// decoding of rec, reading order. Pure functions over arrays.

export type Point = [number, number];
/** Corners clockwise from the top-left, in image orientation: [tl, tr, br, bl]. */
export type Quad = [Point, Point, Point, Point];

export interface DbOptions {
  /** A pixel is text when its probability exceeds this. */
  readonly threshold: number;
  /** A region is kept when the mean probability of its pixels reaches this. */
  readonly boxThreshold: number;
  /** DB predicts shrunk text kernels; each side grows by area·ratio/perimeter to undo that. */
  readonly unclipRatio: number;
  /** Regions whose short side is below this (map pixels) are noise. */
  readonly minSize: number;
  /** Most regions kept, the largest first. */
  readonly maxCandidates: number;
}

/**
 * PaddleOCR v4 det defaults, except unclip 1.8 instead of 1.5: on rendered test text 1.5 left
 * glyph tops and descenders touching the crop edge, and rec scored 1.8 as well or better.
 */
export const DB_DEFAULTS: DbOptions = { threshold: 0.3, boxThreshold: 0.6, unclipRatio: 1.8, minSize: 3, maxCandidates: 1000 };

export interface ScoredQuad {
  readonly quad: Quad;
  readonly score: number;
}

/** A rotated rectangle: centre, unit vector along its width, and its size. */
export interface RotatedRect {
  readonly cx: number;
  readonly cy: number;
  readonly ux: number;
  readonly uy: number;
  readonly width: number;
  readonly height: number;
}

/**
 * DB post-processing: threshold the probability map, label 8-connected components, fit each
 * component's minimum-area rectangle (tilted lines stay tight), score it by the component's mean
 * probability and expand it (unclip). Quads are in map coordinates.
 */
export function dbBoxes(prob: Float32Array, width: number, height: number, opts: DbOptions = DB_DEFAULTS): ScoredQuad[] {
  if (prob.length !== width * height) throw new RangeError(`probability map has ${prob.length} values, expected ${width}x${height}`);
  const found: (ScoredQuad & { area: number })[] = [];
  const seen = new Uint8Array(prob.length);
  const stack = new Int32Array(prob.length);
  // Per-row extent of the current component: its convex hull only needs each row's ends.
  const rowLabel = new Int32Array(height).fill(-1);
  const rowMin = new Int32Array(height);
  const rowMax = new Int32Array(height);
  let label = 0;
  for (let start = 0; start < prob.length; start++) {
    if (seen[start] || prob[start] <= opts.threshold) continue;
    label++;
    // Iterative flood fill: a text line can cover tens of thousands of pixels.
    let top = 0;
    stack[top++] = start;
    seen[start] = 1;
    let y0 = height, y1 = -1, sum = 0, count = 0;
    while (top > 0) {
      const i = stack[--top];
      const x = i % width;
      const y = (i - x) / width;
      if (rowLabel[y] !== label) {
        rowLabel[y] = label;
        rowMin[y] = rowMax[y] = x;
      } else if (x < rowMin[y]) rowMin[y] = x;
      else if (x > rowMax[y]) rowMax[y] = x;
      if (y < y0) y0 = y;
      if (y > y1) y1 = y;
      sum += prob[i];
      count++;
      for (let dy = -1; dy <= 1; dy++) {
        const ny = y + dy;
        if (ny < 0 || ny >= height) continue;
        for (let dx = -1; dx <= 1; dx++) {
          const nx = x + dx;
          if (nx < 0 || nx >= width) continue;
          const j = ny * width + nx;
          if (!seen[j] && prob[j] > opts.threshold) {
            seen[j] = 1;
            stack[top++] = j;
          }
        }
      }
    }
    const score = sum / count;
    if (score < opts.boxThreshold) continue;
    // Pixel (x, y) covers [x, x+1) × [y, y+1): take the corners of each row's run.
    const points: Point[] = [];
    for (let y = y0; y <= y1; y++) {
      points.push([rowMin[y], y], [rowMax[y] + 1, y], [rowMin[y], y + 1], [rowMax[y] + 1, y + 1]);
    }
    const rect = minAreaRect(convexHull(points));
    if (Math.min(rect.width, rect.height) < opts.minSize) continue;
    const d = (rect.width * rect.height * opts.unclipRatio) / (2 * (rect.width + rect.height));
    found.push({ quad: rectCorners({ ...rect, width: rect.width + 2 * d, height: rect.height + 2 * d }), score, area: count });
  }
  return found
    .sort((a, b) => b.area - a.area)
    .slice(0, opts.maxCandidates)
    .map(({ quad, score }) => ({ quad, score }));
}

/** Convex hull, counter-clockwise in y-down coordinates, collinear points dropped (monotone chain). */
export function convexHull(points: readonly Point[]): Point[] {
  const pts = [...points].sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  if (pts.length < 3) return pts;
  const cross = (o: Point, a: Point, b: Point): number => (a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0]);
  const lower: Point[] = [];
  for (const p of pts) {
    while (lower.length >= 2 && cross(lower[lower.length - 2], lower[lower.length - 1], p) <= 0) lower.pop();
    lower.push(p);
  }
  const upper: Point[] = [];
  for (let i = pts.length - 1; i >= 0; i--) {
    const p = pts[i];
    while (upper.length >= 2 && cross(upper[upper.length - 2], upper[upper.length - 1], p) <= 0) upper.pop();
    upper.push(p);
  }
  return lower.slice(0, -1).concat(upper.slice(0, -1));
}

/**
 * Minimum-area rectangle around a convex polygon: one side lies on a hull edge, so try each
 * edge direction. Oriented so its width axis is the more horizontal one and points right.
 */
export function minAreaRect(hull: readonly Point[]): RotatedRect {
  let best: RotatedRect | undefined;
  let bestArea = Infinity;
  const directions: Point[] = hull.length >= 2 ? hull.map((p, i) => sub(hull[(i + 1) % hull.length], p)) : [[1, 0]];
  for (const [ex, ey] of directions) {
    const len = Math.hypot(ex, ey);
    if (len === 0) continue;
    const ux = ex / len, uy = ey / len;
    let minA = Infinity, maxA = -Infinity, minB = Infinity, maxB = -Infinity;
    for (const [px, py] of hull) {
      const a = px * ux + py * uy;
      const b = -px * uy + py * ux;
      if (a < minA) minA = a;
      if (a > maxA) maxA = a;
      if (b < minB) minB = b;
      if (b > maxB) maxB = b;
    }
    const area = (maxA - minA) * (maxB - minB);
    if (area < bestArea) {
      bestArea = area;
      const ca = (minA + maxA) / 2, cb = (minB + maxB) / 2;
      best = { cx: ca * ux - cb * uy, cy: ca * uy + cb * ux, ux, uy, width: maxA - minA, height: maxB - minB };
    }
  }
  if (!best) {
    const [x, y] = hull[0] ?? [0, 0];
    return { cx: x, cy: y, ux: 1, uy: 0, width: 0, height: 0 };
  }
  let { ux, uy, width, height } = best;
  if (Math.abs(uy) > Math.abs(ux)) [ux, uy, width, height] = [-uy, ux, height, width];
  if (ux < 0) [ux, uy] = [-ux, -uy];
  return { cx: best.cx, cy: best.cy, ux, uy, width, height };
}

/** Corners of a rotated rectangle, [tl, tr, br, bl]; its normal (-uy, ux) points down. */
export function rectCorners(r: RotatedRect): Quad {
  const wx = (r.ux * r.width) / 2, wy = (r.uy * r.width) / 2;
  const hx = (-r.uy * r.height) / 2, hy = (r.ux * r.height) / 2;
  return [
    [r.cx - wx - hx, r.cy - wy - hy],
    [r.cx + wx - hx, r.cy + wy - hy],
    [r.cx + wx + hx, r.cy + wy + hy],
    [r.cx - wx + hx, r.cy - wy + hy],
  ];
}

/** Maps a quad by per-axis scale factors and clamps each corner to a width × height image. */
export function scaleQuad(q: Quad, sx: number, sy: number, width: number, height: number): Quad {
  const map = ([x, y]: Point): Point => [Math.min(width, Math.max(0, x * sx)), Math.min(height, Math.max(0, y * sy))];
  return [map(q[0]), map(q[1]), map(q[2]), map(q[3])];
}

/** Width (top/bottom edges) and height (left/right edges) of a quad, the longer of each pair. */
export function quadSize(q: Quad): { width: number; height: number } {
  const [tl, tr, br, bl] = q;
  return { width: Math.max(dist(tl, tr), dist(bl, br)), height: Math.max(dist(tl, bl), dist(tr, br)) };
}

export function sub(a: Point, b: Point): Point {
  return [a[0] - b[0], a[1] - b[1]];
}

function dist(a: Point, b: Point): number {
  return Math.hypot(a[0] - b[0], a[1] - b[1]);
}

/**
 * Rec class table from ppocr_keys_v1.txt: 0 is the CTC blank, 1..N the dictionary lines, N+1 a
 * space (PaddleOCR's use_space_char).
 */
export function recClasses(keys: string): string[] {
  const lines = keys.split(/\r?\n/);
  if (lines[lines.length - 1] === '') lines.pop();
  return ['', ...lines, ' '];
}

export interface Decoded {
  readonly text: string;
  /** Mean of the max probability of every kept time step; 0 when nothing was kept. */
  readonly score: number;
}

/**
 * CTC greedy decoding of rec output [n, steps, classes]: argmax per step, repeats collapsed,
 * blanks dropped.
 */
export function ctcDecode(probs: Float32Array, dims: readonly number[], classes: readonly string[]): Decoded[] {
  const [n, steps, numClasses] = dims;
  if (dims.length !== 3 || probs.length !== n * steps * numClasses) {
    throw new RangeError(`rec output dims [${dims.join(',')}] do not match ${probs.length} values`);
  }
  if (numClasses !== classes.length) {
    throw new RangeError(`rec output has ${numClasses} classes, the dictionary gives ${classes.length}`);
  }
  const out: Decoded[] = [];
  for (let row = 0; row < n; row++) {
    let text = '';
    let sum = 0;
    let kept = 0;
    let prev = 0;
    for (let t = 0; t < steps; t++) {
      const base = (row * steps + t) * numClasses;
      let best = 0;
      let bestP = probs[base];
      for (let c = 1; c < numClasses; c++) {
        if (probs[base + c] > bestP) {
          bestP = probs[base + c];
          best = c;
        }
      }
      if (best !== 0 && best !== prev) {
        text += classes[best];
        sum += bestP;
        kept++;
      }
      prev = best;
    }
    out.push({ text, score: kept ? sum / kept : 0 });
  }
  return out;
}

/**
 * Top-to-bottom, then left-to-right within a line. Like PaddleOCR's sorted_boxes: sort by the
 * top-left corner, then let neighbours whose tops differ by less than half the smaller height
 * swap into x order.
 */
export function readingOrder<T extends { readonly quad: Quad }>(items: readonly T[]): T[] {
  const out = [...items].sort((a, b) => a.quad[0][1] - b.quad[0][1] || a.quad[0][0] - b.quad[0][0]);
  for (let i = 0; i + 1 < out.length; i++) {
    for (let j = i; j >= 0; j--) {
      const a = out[j].quad;
      const b = out[j + 1].quad;
      const tolerance = Math.min(quadSize(a).height, quadSize(b).height) / 2;
      if (Math.abs(b[0][1] - a[0][1]) >= tolerance || b[0][0] >= a[0][0]) break;
      [out[j], out[j + 1]] = [out[j + 1], out[j]];
    }
  }
  return out;
}

/** Corners rounded to whole pixels. */
export function roundQuad(q: Quad): Quad {
  const r = ([x, y]: Point): Point => [Math.round(x), Math.round(y)];
  return [r(q[0]), r(q[1]), r(q[2]), r(q[3])];
}

/** Lines recognised with less confidence are dropped (PaddleOCR's drop_score). */
export const DROP_SCORE = 0.5;

export interface OcrLine {
  text: string;
  score: number;
  /** Corners [tl, tr, br, bl] in original-image pixels; tilted when the text is. */
  box: Quad;
}

/**
 * The answer's lines from det's boxes and rec's reading of each box's crop: empty and unsure
 * readings dropped, the rest in reading order, corners rounded. Here rather than in the pipeline
 * so that a handler composing the stages as functions of their own (bench/functions/ocr-split.ts)
 * answers as `ocr` does without loading the image code.
 */
export function textLines(quads: readonly Quad[], decoded: readonly Decoded[]): OcrLine[] {
  const lines = quads
    .map((quad, i) => ({ quad, text: decoded[i].text.trim(), score: decoded[i].score }))
    .filter((l) => l.text !== '' && l.score >= DROP_SCORE);
  return readingOrder(lines).map(({ quad, text, score }) => ({ text, score, box: roundQuad(quad) }));
}
