import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { binaryAsJson, resultBody, writeTypedArraysAsJson } from '../../runtime/user-code/result-body.ts';
import { binary } from '../../sdk/index.ts';

writeTypedArraysAsJson();

const MAX = 16 * 1024 * 1024;

describe('a handler result as its answer', () => {
  it('JSON for plain values; typed arrays as numbers, bytes as base64, wherever they sit', () => {
    assert.deepEqual(resultBody({ a: 1 }, MAX), { json: '{"a":1}' });
    assert.deepEqual(resultBody(undefined, MAX), { json: 'null' });
    const ids = BigInt64Array.of(7n, -3n, 2n ** 60n);
    const out = resultBody({ embedding: new Float32Array([0.5, -1.25]), ids, mask: Uint8Array.of(1, 2, 255), file: Buffer.from('hi'), nested: [{ t: new Int32Array([7]) }] }, MAX);
    assert.deepEqual(JSON.parse(out.json!), { embedding: [0.5, -1.25], ids: [7, -3, String(2n ** 60n)], mask: 'AQL/', file: 'aGk=', nested: [{ t: [7] }] });
    // A view on part of a larger buffer writes only its own bytes.
    const big = new Uint8Array([9, 1, 2, 9]);
    assert.equal(resultBody(big.subarray(1, 3), MAX).binary?.bytes.toString('hex'), '0102');
    assert.equal(resultBody({ b: big.subarray(1, 3) }, MAX).json, '{"b":"AQI="}');
    // Outside a result, JSON.stringify is Node's own.
    assert.equal(JSON.stringify(Buffer.from('hi')), '{"type":"Buffer","data":[104,105]}');
    assert.equal(JSON.stringify(new Float32Array([0.5])), '{"0":0.5}');
  });

  it('bytes for binary(), a bare Uint8Array or an ArrayBuffer', () => {
    const png = Buffer.from([0x89, 0x50, 0x4e, 0x47]);
    assert.deepEqual(resultBody(binary(png, 'image/png'), MAX), { binary: { bytes: png, contentType: 'image/png' } });
    assert.deepEqual(resultBody(new Uint8Array([1, 2]), MAX).binary, { bytes: Buffer.from([1, 2]), contentType: 'application/octet-stream' });
    assert.deepEqual(resultBody(new Float32Array([1]).buffer, MAX).binary?.bytes.length, 4);
    assert.equal(binaryAsJson({ bytes: png, contentType: 'image/png' }), '{"contentType":"image/png","base64":"iVBORw=="}');
  });

  it('says what is wrong with a result that cannot be answered', () => {
    assert.throws(() => binary(png(), 'png'), /content type "png" is not a media type like image\/png/);
    assert.throws(() => binary('text' as unknown as Uint8Array), /takes a Uint8Array, Buffer or ArrayBuffer, not string/);
    assert.throws(() => resultBody({ n: 1n }, MAX), /its result cannot be written as JSON \(.*BigInt.*\); return plain values, or bytes with binary\(\)/);
    assert.throws(() => resultBody(() => 1, MAX), /its result cannot be written as JSON \(a function\)/);
    assert.throws(() => binary(png(), 'image/png; name="\x00"'), /is not a media type/);
    assert.equal(binary(png(), 'text/csv; charset=utf-8').contentType, 'text/csv; charset=utf-8');
  });
});

const png = () => Buffer.from([0x89]);
