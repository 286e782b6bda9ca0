// An answer of `bytes` bytes, as the bytes themselves (binary()) or as base64 in JSON, for the
// bench's body section (bench/body.ts): what an answer's encoding costs, with no model in the
// way. The bytes are made from a seed once per size and kept, as a handler would keep a file.
import { binary, defineFunction } from 'embers';
import { z } from 'zod';

const made = new Map<number, Buffer>();

/** `n` bytes from a linear congruential generator: the same every run, and no better compressed than a JPEG's. */
function bytesOf(n: number): Buffer {
  let b = made.get(n);
  if (b) return b;
  b = Buffer.alloc(n);
  let x = 0x2026;
  for (let i = 0; i < n; i++) {
    x = (Math.imul(x, 1664525) + 1013904223) >>> 0;
    b[i] = x >>> 24;
  }
  made.set(n, b);
  return b;
}

export default defineFunction({
  name: 'blob',
  input: z.object({ bytes: z.number().int().min(1).max(16 * 1024 * 1024), as: z.enum(['binary', 'json']) }),
  handler: ({ bytes, as }) => (as === 'binary' ? binary(bytesOf(bytes), 'image/jpeg') : { image: bytesOf(bytes).toString('base64') }),
});
