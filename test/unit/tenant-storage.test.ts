// The pure parts of tenant-scoped storage: s3:// URIs judged by S3's naming rules, which tenant
// a key of the platform bucket belongs to, and multipart uploads read however they are chunked.
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { describe, it } from 'node:test';
import { bucketNameProblem, checkS3Uri } from '../../core/s3-uri.ts';
import { keyOwner } from '../../core/tenant-objects.ts';
import { ApiError } from '../../gateway/errors.ts';
import { spoolMultipart } from '../../gateway/multipart.ts';

describe('s3:// URIs', () => {
  it('keep S3 bucket naming rules and name a key', () => {
    for (const ok of ['embers', 'my.bucket-1', 'a1b', 'x'.repeat(63)]) assert.equal(bucketNameProblem(ok), null, ok);
    for (const bad of ['EMBERS', 'ab', 'x'.repeat(64), '-abc', 'abc.', 'a..b', '10.0.0.1', 'a_b']) assert.ok(bucketNameProblem(bad), bad);
    assert.deepEqual(checkS3Uri('s3://embers/tenants/t_1/x.jsonl'), { bucket: 'embers', key: 'tenants/t_1/x.jsonl' });
    for (const bad of ['s3://embers/', 's3://embers', 'https://embers/x', 's3://embers/a/../b', 's3://embers//x', 's3://embers/a/./b', `s3://embers/${'k'.repeat(1025)}`]) {
      assert.ok('problem' in checkS3Uri(bad), bad);
    }
  });
});

describe('keyOwner', () => {
  const batches: Record<string, string> = { batch_a: 't_a' };
  const owner = (key: string) => keyOwner(key, async (id) => batches[id] ?? null);

  it("gives tenants their prefix, the default tenant its pre-tenant keys, and nobody the rest", async () => {
    assert.equal(await owner('tenants/t_a/files/file_x.jsonl'), 't_a');
    assert.equal(await owner('tenants/default/uploads/x.jsonl'), 'default');
    assert.equal(await owner('tenants/t_a'), null);
    assert.equal(await owner('tenants/T_A/x'), null);
    assert.equal(await owner('models/sha256/00.onnx'), 'default');
    assert.equal(await owner('files/file_x.jsonl'), 'default');
    assert.equal(await owner('batches/batch_a/input.jsonl'), 't_a', "a legacy batch key is its batch's tenant's");
    assert.equal(await owner('batches/batch_gone/input.jsonl'), 'default');
    assert.equal(await owner('functions/echo/v1/bundle.mjs'), null);
    assert.equal(await owner('models/other/x.onnx'), null);
    assert.equal(await owner('uploads/x.jsonl'), null);
    assert.equal(await owner('loose'), null);
  });
});

describe('spoolMultipart', () => {
  const tooLarge = () => new ApiError(413, 'too_large', 'too large');

  async function encoded(form: FormData): Promise<{ bytes: Buffer; type: string }> {
    const res = new Response(form);
    return { bytes: Buffer.from(await res.arrayBuffer()), type: res.headers.get('content-type')! };
  }
  const inChunks = (bytes: Buffer, size: number) => {
    let at = 0;
    return new ReadableStream<Uint8Array>({
      pull(ctl) {
        if (at >= bytes.length) return ctl.close();
        ctl.enqueue(new Uint8Array(bytes.subarray(at, (at += size))));
      },
    });
  };

  it('finds the file and the fields wherever the chunks split the boundaries', async () => {
    // Content that holds CRLFs and dashes, as a delimiter's start would.
    const content = '{"custom_id":"a"}\r\n--\r\n-{"custom_id":"b"}\r\n';
    const form = new FormData();
    form.append('purpose', 'batch');
    form.append('file', new Blob([content]), 'in.jsonl');
    form.append('note', 'after the file');
    const { bytes, type } = await encoded(form);
    for (const size of [1, 2, 3, 7, 40, 64, bytes.length]) {
      const got = await spoolMultipart(inChunks(bytes, size), type, { fileField: 'file', maxBytes: 1024, tooLarge });
      try {
        assert.equal(await readFile(got.file.file, 'utf8'), content, `chunks of ${size}`);
        assert.deepEqual([got.file.bytes, got.filename, got.fields], [Buffer.byteLength(content), 'in.jsonl', { purpose: 'batch', note: 'after the file' }]);
      } finally {
        await got.file.dispose();
      }
    }
  });

  it('refuses a file over the bound, a form without the file, and a body that is not a form', async () => {
    const big = new FormData();
    big.append('file', new Blob(['x'.repeat(2000)]), 'big.jsonl');
    const b = await encoded(big);
    await assert.rejects(spoolMultipart(inChunks(b.bytes, 100), b.type, { fileField: 'file', maxBytes: 1024, tooLarge }), (e: ApiError) => e.status === 413);
    const none = new FormData();
    none.append('purpose', 'batch');
    const n = await encoded(none);
    await assert.rejects(spoolMultipart(inChunks(n.bytes, 100), n.type, { fileField: 'file', maxBytes: 1024, tooLarge }), /"file" part/);
    await assert.rejects(spoolMultipart(inChunks(Buffer.from('plain text'), 4), 'multipart/form-data; boundary=zz', { fileField: 'file', maxBytes: 1024, tooLarge }), /closing boundary/);
    await assert.rejects(spoolMultipart(inChunks(Buffer.from(''), 4), 'multipart/form-data', { fileField: 'file', maxBytes: 1024, tooLarge }), /boundary/);
  });
});
