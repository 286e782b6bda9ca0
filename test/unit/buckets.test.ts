// Sealed secrets, which endpoints a registered bucket may have, and the model cache's names for
// objects outside the platform's bucket.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { refusedEndpoint, sourceTag } from '../../core/buckets.ts';
import { ObjectStore } from '../../core/s3.ts';
import { Sealer } from '../../core/sealed.ts';

const KEY = 'k'.repeat(32);

describe('Sealer', () => {
  const sealer = new Sealer(KEY, 'buckets');

  it('opens what it sealed, for the same context only', () => {
    const sealed = sealer.seal('s3cret', 'bucket:acme:data');
    assert.ok(!sealed.includes('s3cret'));
    assert.notEqual(sealer.seal('s3cret', 'bucket:acme:data'), sealed, 'a fresh nonce each time');
    assert.equal(sealer.open(sealed, 'bucket:acme:data'), 's3cret');
    assert.equal(sealer.open(sealed, 'bucket:bravo:data'), null, "another tenant's context");
  });

  it('opens nothing altered, nor sealed under another key or purpose', () => {
    const sealed = sealer.seal('s3cret', 'c');
    const parts = sealed.split('.');
    const flipped = Buffer.from(parts[2], 'base64url');
    flipped[0] ^= 1;
    assert.equal(sealer.open([parts[0], parts[1], flipped.toString('base64url'), parts[3]].join('.'), 'c'), null);
    assert.equal(new Sealer('x'.repeat(32), 'buckets').open(sealed, 'c'), null);
    assert.equal(new Sealer(KEY, 'other').open(sealed, 'c'), null);
    for (const junk of ['', 'v1', 'v2.a.b.c', 'v1.!!.!!.!!']) assert.equal(sealer.open(junk, 'c'), null);
  });
});

describe('refusedEndpoint', () => {
  it('takes public https endpoints', async () => {
    assert.equal(await refusedEndpoint('https://1.1.1.1', false), null);
    assert.equal(await refusedEndpoint('https://[2606:4700::1111]:9000', false), null);
  });

  it('refuses other schemes, credentials in the URL and non-public addresses', async () => {
    for (const url of ['http://1.1.1.1', 'ftp://1.1.1.1', 'not a url', 'https://user:pw@1.1.1.1', 'https://127.0.0.1:9000', 'https://localhost', 'https://169.254.169.254', 'https://10.0.0.8', 'https://[::1]']) {
      assert.ok(await refusedEndpoint(url, false), url);
    }
  });

  it('takes http and private addresses when they are allowed', async () => {
    assert.equal(await refusedEndpoint('http://127.0.0.1:9000', true), null);
    assert.ok(await refusedEndpoint('ftp://127.0.0.1', true));
  });
});

describe('sourceTag', () => {
  it('tells the same key apart on different servers and for different tenants', () => {
    const at = (endpoint?: string) => new ObjectStore({ bucket: 'b', endpoint, credentials: { accessKeyId: 'a', secretAccessKey: 's' } });
    const [x, y, aws] = [at('https://s3.one.example'), at('https://s3.two.example'), at()];
    assert.notEqual(sourceTag('t', x, 's3://b/m.onnx'), sourceTag('t', y, 's3://b/m.onnx'));
    assert.notEqual(sourceTag('t', aws, 's3://b/m.onnx'), sourceTag('t', aws, 's3://b/n.onnx'));
    assert.notEqual(sourceTag('t', x, 's3://b/m.onnx'), sourceTag('u', x, 's3://b/m.onnx'), 'each tenant its own files');
    assert.equal(sourceTag('t', x, 's3://b/m.onnx'), sourceTag('t', at('https://s3.one.example'), 's3://b/m.onnx'));
    for (const s of [x, y, aws]) s.destroy();
  });
});
