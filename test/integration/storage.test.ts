// S3 scoped to the tenant: batch inputs and deploy models resolve only to a tenant's own objects
// (another tenant's batch files, bundles, models and files are refused exactly as missing ones),
// model uploads kept per tenant, the Files API and its CLI, and s3:// URIs checked by S3's rules.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { EmbersClient } from '../../cli/client.ts';
import { deployFile } from '../../cli/deploy.ts';
import { storeFromConfig, type ObjectStore } from '../../core/s3.ts';
import { ROOT, eventually, fixture, shipped, startTestPlatform, tenantWithKey, type TestPlatform } from '../helpers/platform.ts';

let p: TestPlatform;
let store: ObjectStore;
let tmp: string;
const MAX_BATCH_BYTES = 256 * 1024;

before(async () => {
  p = await startTestPlatform({ EMBERS_SCHEDULER_TICK_MS: '100', EMBERS_MAX_BATCH_BYTES: String(MAX_BATCH_BYTES) });
  store = storeFromConfig({ EMBERS_S3_ENDPOINT: p.s3Endpoint, EMBERS_S3_BUCKET: 'embers' });
  tmp = await mkdtemp(path.join(os.tmpdir(), 'embers-storage-'));
});
after(async () => {
  store?.destroy();
  await p?.close();
  await rm(tmp, { recursive: true, force: true });
});

type ErrorBody = { error: { code: string; message: string } };
interface Batch {
  id: string;
  status: string;
  inputUri: string;
  outputUri?: string;
  errorsUri?: string;
  request_counts: { total: number; completed: number; failed: number };
}
interface FileView {
  id: string;
  object: string;
  bytes: number;
  filename: string;
  purpose: string;
  createdAt: string;
}

/** fetch with `key`; no Content-Type unless `init` sets one (a FormData body sets its own). */
const as = (key: string) => (route: string, init: RequestInit = {}) => p.fetch(route, { ...init, headers: { authorization: `Bearer ${key}`, ...init.headers } });
const post = (body: unknown): RequestInit => ({ method: 'POST', body: JSON.stringify(body), headers: { 'content-type': 'application/json' } });

async function json<T = ErrorBody>(res: Response | Promise<Response>, status: number): Promise<T> {
  const r = await res;
  const body = await r.text();
  assert.equal(r.status, status, body);
  return JSON.parse(body) as T;
}

/** Asserts `got` is the answer `missing` was, but for the thing it names (`name` instead of `missingName`). */
function sameAsMissing(got: { status: number; body: ErrorBody }, missing: { status: number; body: ErrorBody }, name: string, missingName: string, what: string) {
  assert.equal(got.status, missing.status, `${what}: ${got.body.error.message}`);
  assert.deepEqual(got.body, { error: { ...missing.body.error, message: missing.body.error.message.replaceAll(missingName, name) } }, what);
}

async function answer(res: Promise<Response>): Promise<{ status: number; body: ErrorBody }> {
  const r = await res;
  return { status: r.status, body: (await r.json()) as ErrorBody };
}

/** A body of `n` chunks of `size` bytes, sent chunked (a stream has no Content-Length). */
const chunks = (n: number, size: number) => {
  const chunk = new TextEncoder().encode('x'.repeat(size));
  let sent = 0;
  return new ReadableStream<Uint8Array>({ pull: (ctl) => (sent++ < n ? ctl.enqueue(chunk) : ctl.close()) });
};
const lines = (...ids: string[]) => ids.map((id) => JSON.stringify({ custom_id: id, input: { id } })).join('\n');
const sha256 = (b: Buffer | string) => createHash('sha256').update(b).digest('hex');

function embers(args: string[], env: Record<string, string>): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, [path.join(ROOT, 'cli/bin.mjs'), ...args], { cwd: tmp, env: { ...process.env, EMBERS_URL: p.url, ...env }, timeout: 60_000 }, (err, stdout, stderr) =>
      resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr }),
    );
  });
}

describe('S3 scoped to the tenant', () => {
  let a: string;
  let b: string;
  let keyA: string;
  let keyB: string;
  let asA: ReturnType<typeof as>;
  let asB: ReturnType<typeof as>;
  const settled = (f: ReturnType<typeof as>, id: string) =>
    eventually(async () => {
      const batch = await json<Batch>(f(`/v1/batches/${id}`), 200);
      return ['completed', 'failed', 'cancelled'].includes(batch.status) ? batch : null;
    }, `batch ${id} to finish`, 60_000);

  before(async () => {
    ({ id: a, key: keyA } = await tenantWithKey(p, 'acme'));
    ({ id: b, key: keyB } = await tenantWithKey(p, 'bravo'));
    asA = as(keyA);
    asB = as(keyB);
    await deployFile(new EmbersClient({ url: p.url, apiKey: keyA }), shipped('echo.ts'));
    await deployFile(new EmbersClient({ url: p.url, apiKey: keyB }), fixture('sleepy.ts'));
    await p.deploy(fixture('order.ts'));
  });

  it("another tenant's batch files, bundle, model uploads and files are refused exactly as missing ones", async () => {
    // A's batch: its input, output and errors files live under A's prefix.
    const created = await json<Batch>(asA('/v1/batches?function=echo', { method: 'POST', body: lines('x', 'y') }), 201);
    assert.ok(created.inputUri.startsWith(`s3://embers/tenants/${a}/batches/${created.id}/`), created.inputUri);
    const done = await settled(asA, created.id);
    assert.equal(done.status, 'completed');
    assert.ok(done.outputUri!.startsWith(`s3://embers/tenants/${a}/`) && done.errorsUri!.startsWith(`s3://embers/tenants/${a}/`), String(done.outputUri));
    // A's own input is A's to use again.
    await json(asA('/v1/batches', post({ function: 'echo', input_uri: done.outputUri })), 201);

    // A's bundle, a model A uploaded, a model the default tenant uploaded (pre-tenant key), a
    // file A uploaded, a legacy batch key whose record is A's, a bucket that is not the platform's.
    const bundleKey = (await json<{ manifest: { bundle: { key: string } } }>(asA('/v1/functions/echo'), 200)).manifest.bundle.key;
    const model = Buffer.from('not really onnx, but content-addressed all the same');
    const hex = sha256(model);
    const uploaded = await json<{ uri: string }>(asA(`/v1/models/sha256/${hex}`, { method: 'PUT', body: model }), 201);
    assert.equal(uploaded.uri, `s3://embers/tenants/${a}/models/sha256/${hex}.onnx`);
    const defaultModel = Buffer.from('the default tenant keeps its pre-tenant keys');
    const defaultUri = (await json<{ uri: string }>(p.fetch(`/v1/models/sha256/${sha256(defaultModel)}`, { method: 'PUT', body: defaultModel }), 201)).uri;
    assert.equal(defaultUri, `s3://embers/models/sha256/${sha256(defaultModel)}.onnx`);
    const file = await json<FileView>(asA('/v1/files', { method: 'POST', body: lines('f') }), 201);
    await store.put(`batches/${created.id}/input.jsonl`, lines('legacy'));
    await store.put('elsewhere/loose.jsonl', lines('loose'));
    const foreign = [
      done.inputUri,
      done.outputUri!,
      done.errorsUri!,
      `s3://embers/${bundleKey}`,
      uploaded.uri,
      defaultUri,
      `s3://embers/tenants/${a}/files/${file.id}.jsonl`,
      `s3://embers/batches/${created.id}/input.jsonl`,
      's3://embers/elsewhere/loose.jsonl',
      `s3://other-bucket/tenants/${b}/x.jsonl`,
    ];

    const missingUri = `s3://embers/tenants/${b}/nothing-here.jsonl`;
    const missing = await answer(asB('/v1/batches', post({ function: 'sleepy', input_uri: missingUri })));
    assert.equal(missing.status, 400);
    assert.equal(missing.body.error.code, 'input_not_found');
    for (const uri of foreign) sameAsMissing(await answer(asB('/v1/batches', post({ function: 'sleepy', input_uri: uri }))), missing, uri, missingUri, `batch input ${uri}`);
    // The default tenant is a tenant like the others: A's objects are not its own either.
    const missingForDefault = await answer(p.fetch('/v1/batches', post({ function: 'order', input_uri: missingUri })));
    for (const uri of [done.inputUri, uploaded.uri, `s3://embers/${bundleKey}`, `s3://embers/batches/${created.id}/input.jsonl`]) {
      sameAsMissing(await answer(p.fetch('/v1/batches', post({ function: 'order', input_uri: uri }))), missingForDefault, uri, missingUri, `default: ${uri}`);
    }
    // …and the legacy batch key is A's (its record says so), not the default tenant's or B's.
    await json(asA('/v1/batches', post({ function: 'echo', input_uri: `s3://embers/batches/${created.id}/input.jsonl` })), 201);

    // Deploy models: another's is "does not exist" as a missing one is; one's own passes.
    const deploy = (f: ReturnType<typeof as>, uri: string, name = 'weights') => f('/v1/functions', post({ spec: { name, models: { m: uri }, inputSchema: { type: 'object' } }, bundle: Buffer.from('export default {}').toString('base64') }));
    const missingModel = `s3://embers/tenants/${b}/models/sha256/${'0'.repeat(64)}.onnx`;
    const noModel = await answer(deploy(asB, missingModel));
    assert.equal(noModel.body.error.code, 'model_not_found');
    for (const uri of foreign) sameAsMissing(await answer(deploy(asB, uri)), noModel, uri, missingModel, `model ${uri}`);
    await json(deploy(asA, uploaded.uri, 'weights-a'), 201);
    await json(deploy(p.fetch, defaultUri, 'weights-d'), 201);

    // Model uploads are per tenant: B cannot tell that A (or the default tenant) has a file.
    const unknownHex = sha256('never uploaded');
    for (const h of [hex, sha256(defaultModel)]) {
      assert.equal((await asB(`/v1/models/sha256/${h}`, { method: 'HEAD' })).status, 404);
      sameAsMissing(await answer(asB(`/v1/models/sha256/${h}`)), await answer(asB(`/v1/models/sha256/${unknownHex}`)), h, unknownHex, `GET model ${h}`);
    }
    assert.equal((await asA(`/v1/models/sha256/${hex}`, { method: 'HEAD' })).status, 200);
    // B uploads the same bytes: its own copy, under its own prefix.
    assert.equal((await json<{ uri: string }>(asB(`/v1/models/sha256/${hex}`, { method: 'PUT', body: model }), 201)).uri, `s3://embers/tenants/${b}/models/sha256/${hex}.onnx`);

    // A's file: unknown to B by id, as a missing or malformed id is; unusable as a batch input.
    const unknownId = 'file_AAAAAAAAAAAAAAAA';
    for (const [route, init] of [['', {}], ['/content', {}], ['', { method: 'DELETE' }]] as [string, RequestInit][]) {
      const missingFile = await answer(asB(`/v1/files/${unknownId}${route}`, init));
      assert.equal(missingFile.status, 404);
      sameAsMissing(await answer(asB(`/v1/files/${file.id}${route}`, init)), missingFile, file.id, unknownId, `file ${route} ${init.method ?? 'GET'}`);
      sameAsMissing(await answer(asB(`/v1/files/file_bad${route}`, init)), missingFile, 'file_bad', unknownId, `malformed id ${route}`);
      // B naming A with ?tenant= is refused alike whether the file exists or not (it was a 403
      // for A's file and a 404 for a missing one: a test of which ids exist).
      const missingAsA = await answer(asB(`/v1/files/${unknownId}${route}?tenant=${a}`, init));
      assert.equal(missingAsA.status, 403);
      sameAsMissing(await answer(asB(`/v1/files/${file.id}${route}?tenant=${a}`, init)), missingAsA, file.id, unknownId, `?tenant= ${route} ${init.method ?? 'GET'}`);
    }
    const noFile = await answer(asB('/v1/batches', post({ function: 'sleepy', input_file_id: unknownId })));
    assert.equal(noFile.status, 400);
    sameAsMissing(await answer(asB('/v1/batches', post({ function: 'sleepy', input_file_id: file.id }))), noFile, file.id, unknownId, 'batch from another tenant\'s file');
    assert.equal((await asA(`/v1/files/${file.id}`)).status, 200, "A's file is still there");
  });

  it('the Files API: upload (body, chunked or multipart), list, show, content, a batch from it, delete', async () => {
    const body = lines('one', 'two', 'three');
    const raw = await json<FileView>(asA('/v1/files?filename=pages.jsonl', { method: 'POST', body }), 201);
    assert.match(raw.id, /^file_[A-Za-z0-9_-]{16}$/);
    assert.deepEqual({ ...raw, id: '', createdAt: '' }, { id: '', object: 'file', bytes: Buffer.byteLength(body), filename: 'pages.jsonl', purpose: 'batch', createdAt: '' });

    // Chunked (no Content-Length): spooled as it streams.
    const halves = [Buffer.from(body.slice(0, 10)), Buffer.from(body.slice(10))];
    const streamed = new ReadableStream<Uint8Array>({ pull: (ctl) => (halves.length ? ctl.enqueue(halves.shift()!) : ctl.close()) });
    const chunked = await json<FileView>(asA('/v1/files', { method: 'POST', body: streamed, duplex: 'half' } as RequestInit), 201);
    assert.equal(chunked.bytes, Buffer.byteLength(body));

    // Multipart, as OpenAI's clients send it.
    const form = new FormData();
    form.append('purpose', 'batch');
    form.append('file', new Blob([body]), 'form.jsonl');
    const multipart = await json<FileView>(asA('/v1/files', { method: 'POST', body: form }), 201);
    assert.deepEqual([multipart.filename, multipart.bytes, multipart.purpose], ['form.jsonl', Buffer.byteLength(body), 'batch']);

    const listed = await json<{ object: string; data: FileView[] }>(asA('/v1/files'), 200);
    assert.equal(listed.object, 'list');
    assert.deepEqual(listed.data.slice(0, 3).map((f) => f.id), [multipart.id, chunked.id, raw.id], 'newest first');
    assert.deepEqual((await json<{ data: FileView[] }>(asB('/v1/files'), 200)).data, [], "B sees none of A's");
    assert.deepEqual(await json<FileView>(asA(`/v1/files/${raw.id}`), 200), raw);
    for (const f of [raw, chunked, multipart]) assert.equal(await (await asA(`/v1/files/${f.id}/content`)).text(), body);

    const batch = await json<Batch>(asA('/v1/batches', post({ function: 'echo', input_file_id: multipart.id })), 201);
    const done = await settled(asA, batch.id);
    assert.deepEqual(done.request_counts, { total: 3, completed: 3, failed: 0 });
    const output = (await (await asA(`/v1/batches/${batch.id}/output`)).text()).trim().split('\n').map((l) => JSON.parse(l) as { custom_id: string });
    assert.deepEqual(output.map((o) => o.custom_id), ['one', 'two', 'three']);

    assert.deepEqual(await json(asA(`/v1/files/${raw.id}`, { method: 'DELETE' }), 200), { id: raw.id, object: 'file', deleted: true });
    await json(asA(`/v1/files/${raw.id}`), 404);
    await json(asA(`/v1/files/${raw.id}/content`), 404);
    await json(asA(`/v1/files/${raw.id}`, { method: 'DELETE' }), 404);
    assert.ok(!(await json<{ data: FileView[] }>(asA('/v1/files'), 200)).data.some((f) => f.id === raw.id));
    assert.equal(await store.head(`tenants/${a}/files/${raw.id}.jsonl`), null, 'its bytes are gone from S3');

    const noFileForm = new FormData();
    noFileForm.append('purpose', 'batch');
    const cases: [string, RequestInit, number, RegExp][] = [
      ['/v1/files?purpose=fine-tune', { method: 'POST', body }, 400, /purpose must be "batch"/],
      ['/v1/files', { method: 'POST', body: '' }, 400, /empty/],
      ['/v1/files', { method: 'POST', body: Buffer.alloc(MAX_BATCH_BYTES + 1, 'x'), headers: { 'content-length': String(MAX_BATCH_BYTES + 1) } }, 413, /EMBERS_MAX_BATCH_BYTES/],
      // Chunked (no Content-Length): counted as it streams.
      ['/v1/files', { method: 'POST', body: chunks(5, 64 * 1024), duplex: 'half' } as RequestInit, 413, /EMBERS_MAX_BATCH_BYTES/],
      ['/v1/files', { method: 'POST', body: noFileForm }, 400, /"file" part/],
      ['/v1/files', { method: 'POST', body: 'not a form', headers: { 'content-type': 'multipart/form-data; boundary=zz' } }, 400, /closing boundary/],
      ['/v1/files?limit=0', {}, 400, /limit must be a whole number/],
      ['/v1/batches', post({ function: 'echo', input_file_id: multipart.id, input_uri: 's3://embers/x.jsonl' }), 400, /give one of input_uri/],
    ];
    for (const [route, init, status, message] of cases) assert.match((await json(asA(route, init), status)).error.message, message, route);
  });

  it('s3:// URIs that break the bucket naming rules, or name no key, are 400s that say why', async () => {
    const cases: [string, RegExp][] = [
      ['s3://EMBERS/x.jsonl', /lower-case letters, digits, dots and hyphens/],
      ['s3://a/b', /3 to 63 characters/],
      [`s3://${'b'.repeat(64)}/x`, /3 to 63 characters/],
      ['s3://-embers/x.jsonl', /start and end with a letter or digit/],
      ['s3://em..bers/x.jsonl', /two dots/],
      ['s3://192.168.1.20/x.jsonl', /IP addresses/],
      ['s3://embers/', /no object key/],
      ['s3://embers', /not an s3:\/\/bucket\/key URI/],
      [`s3://embers/tenants/${a}/../../functions/echo/v1/bundle.mjs`, /"\.\."/],
    ];
    for (const [uri, message] of cases) {
      const res = await json(asA('/v1/batches', post({ function: 'echo', input_uri: uri })), 400);
      assert.equal(res.error.code, 'invalid_request', uri);
      assert.match(res.error.message, message, uri);
      const dep = await json(asA('/v1/functions', post({ spec: { name: 'weights', models: { m: uri }, inputSchema: {} }, bundle: Buffer.from('export default {}').toString('base64') })), 400);
      assert.equal(dep.error.code, 'invalid_deploy', uri);
      assert.match(dep.error.message, message, uri);
    }
  });

  it("a tenant's deploy uploads its models under its own prefix and runs them; the CLI's files and batch create", async () => {
    const deployed = await deployFile(new EmbersClient({ url: p.url, apiKey: keyB }), fixture('tiny.ts'));
    for (const uri of Object.values(deployed.models)) assert.match(uri, new RegExp(`^s3://embers/tenants/${b}/models/sha256/[0-9a-f]{64}\\.onnx$`));
    const ran = await json<{ classes: number[][] }>(asB('/v1/run/tiny', post({ n: 1 })), 200);
    assert.equal(ran.classes.length, 1);
    // The same file is not A's: A would upload its own copy.
    const hex = /([0-9a-f]{64})\.onnx$/.exec(Object.values(deployed.models)[0])![1];
    assert.equal((await asA(`/v1/models/sha256/${hex}`, { method: 'HEAD' })).status, 404);

    const env = { EMBERS_API_KEY: keyA };
    const input = path.join(tmp, 'cli.jsonl');
    await writeFile(input, `${lines('c1', 'c2')}\n`);
    const up = await embers(['files', 'upload', input], env);
    assert.equal(up.code, 0, up.stderr);
    const id = up.stdout.trim();
    assert.match(id, /^file_/);
    const list = await embers(['files', 'list', '--json'], env);
    assert.equal(list.code, 0, list.stderr);
    assert.ok((JSON.parse(list.stdout) as FileView[]).some((f) => f.id === id && f.filename === 'cli.jsonl'));
    const created = await embers(['batch', 'create', 'echo', '--file', id, '--wait', '--json'], env);
    assert.equal(created.code, 0, created.stderr);
    assert.deepEqual((JSON.parse(created.stdout) as Batch).request_counts, { total: 2, completed: 2, failed: 0 });
    const both = await embers(['batch', 'create', 'echo'], env);
    assert.equal(both.code, 2);
    assert.match(both.stderr, /give one of --file/);
    const del = await embers(['files', 'delete', id], env);
    assert.equal(del.code, 0, del.stderr);
    const again = await embers(['files', 'delete', id], env);
    assert.equal(again.code, 1);
    assert.match(again.stderr, /404: no file/);
    const help = await embers(['files', '--help'], env);
    assert.match(help.stdout, /upload/);
  });
});
