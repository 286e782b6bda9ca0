import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import sharp from 'sharp';
import { decodeImage, sniffFormat } from '../../functions/ocr/preprocess.ts';

const pixels = () => sharp({ create: { width: 8, height: 4, channels: 3, background: '#336699' } });

describe('ocr image decoding', () => {
  it('tells formats by their first bytes', async () => {
    assert.equal(sniffFormat(await pixels().png().toBuffer()), 'png');
    assert.equal(sniffFormat(await pixels().jpeg().toBuffer()), 'jpeg');
    assert.equal(sniffFormat(await pixels().webp().toBuffer()), 'webp');
    assert.equal(sniffFormat(await pixels().gif().toBuffer()), 'gif');
    assert.equal(sniffFormat(await pixels().tiff().toBuffer()), 'tiff');
    assert.equal(sniffFormat(Buffer.from('  <svg xmlns="http://www.w3.org/2000/svg"/>')), 'svg or other markup');
    assert.equal(sniffFormat(Buffer.from('definitely not a png')), 'unknown');
    assert.equal(sniffFormat(new Uint8Array(0)), 'unknown');
  });

  it('decodes PNG and JPEG, and names what it refuses', async () => {
    for (const bytes of [await pixels().png().toBuffer(), await pixels().jpeg().toBuffer()]) {
      const img = await decodeImage(bytes);
      assert.deepEqual([img.width, img.height, img.data.length], [8, 4, 8 * 4 * 3]);
    }
    await assert.rejects(decodeImage(await pixels().webp().toBuffer()), /format is webp/);
    const png = await pixels().png().toBuffer();
    await assert.rejects(decodeImage(png.subarray(0, 20)), 'a truncated PNG fails in the decoder');
  });
});
