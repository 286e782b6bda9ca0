// The byte channel beside the JSON one: frames split anywhere across chunks, taken before or
// after they arrive, each into a buffer of its own; a stream that breaks its bounds stops.
import assert from 'node:assert/strict';
import { PassThrough } from 'node:stream';
import { describe, it } from 'node:test';
import { FrameReader, writeFrame } from '../../runtime/channel/byte-channel.ts';

const frames = (...fs: [number, Buffer][]) => {
  const out = new PassThrough();
  const chunks: Buffer[] = [];
  out.on('data', (c: Buffer) => chunks.push(c));
  for (const [n, b] of fs) writeFrame(out, n, b);
  return Buffer.concat(chunks);
};

describe('FrameReader', () => {
  it('hands each frame to its request, split across chunks at every point, taken before or after it came', async () => {
    const a = Buffer.from('first frame');
    const b = Buffer.alloc(100_000, 7);
    const wire = frames([1, a], [2, Buffer.alloc(0)], [3, b]);
    for (const size of [1, 3, 8, 9, 64, wire.length]) {
      const stream = new PassThrough();
      const reader = new FrameReader(stream, { maxBytes: 1 << 20, maxHeld: 8, onCorrupt: (why) => assert.fail(why) });
      const early = reader.take(3);
      for (let at = 0; at < wire.length; at += size) stream.write(wire.subarray(at, at + size));
      await new Promise((r) => setImmediate(r));
      assert.deepEqual(await reader.take(1), a);
      assert.equal((await reader.take(2)).length, 0);
      const got = await early;
      assert.deepEqual(got, b);
      assert.equal(got.byteOffset, 0, 'a frame has a buffer of its own (tensor views are aligned)');
    }
  });

  it('stops at a frame over its bound, or at too many frames nobody asked for', async () => {
    const big = new PassThrough();
    let why = '';
    new FrameReader(big, { maxBytes: 10, maxHeld: 8, onCorrupt: (w) => (why = w) });
    big.write(frames([1, Buffer.alloc(11)]));
    await new Promise((r) => setImmediate(r));
    assert.match(why, /11 bytes, over 10/);
    const many = new PassThrough();
    why = '';
    new FrameReader(many, { maxBytes: 10, maxHeld: 2, onCorrupt: (w) => (why = w) });
    many.write(frames([1, Buffer.alloc(1)], [2, Buffer.alloc(1)], [3, Buffer.alloc(1)]));
    await new Promise((r) => setImmediate(r));
    assert.match(why, /2 frames that no request asked for/);
  });
});
