// GET /v1/openapi.json and /docs on a real platform: the document validates (a maintained
// OpenAPI validator), lists a deployed function with its stored input schema for its own tenant
// only, follows deploys and deletes, and describes what the routes really answer.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Validator } from '@seriousme/openapi-schema-validator';
import { Ajv2020 } from 'ajv/dist/2020.js';
import { EmbersClient } from '../../cli/client.ts';
import { deployFile } from '../../cli/deploy.ts';
import { eventually, fixture, shipped, startTestPlatform, tenantWithKey, type TestPlatform } from '../helpers/platform.ts';

let p: TestPlatform;
let acme: { id: string; key: string };
let bravo: { id: string; key: string };

before(async () => {
  p = await startTestPlatform();
  acme = await tenantWithKey(p, 'acme');
  bravo = await tenantWithKey(p, 'bravo');
  const client = new EmbersClient({ url: p.url, apiKey: acme.key });
  await deployFile(client, shipped('echo.ts'));
  await deployFile(client, fixture('bytesize.ts'));
  await deployFile(client, fixture('tree.ts'));
});
after(() => p?.close());

type Doc = { openapi: string; paths: Record<string, Record<string, { requestBody?: { content: Record<string, { schema: unknown }> } }>>; components: { schemas: Record<string, Record<string, unknown>> } };

const as = (key: string | undefined) => (route: string, init: RequestInit = {}) => {
  const headers = new Headers(init.headers);
  if (key) headers.set('authorization', `Bearer ${key}`);
  return fetch(`${p.url}${route}`, { ...init, headers });
};

async function documentFor(key: string | undefined, query = ''): Promise<Doc> {
  const res = await as(key)(`/v1/openapi.json${query}`);
  assert.equal(res.status, 200);
  assert.match(res.headers.get('content-type') ?? '', /^application\/json/);
  return (await res.json()) as Doc;
}

const runPaths = (doc: Doc) => Object.keys(doc.paths).filter((route) => route.startsWith('/v1/run/')).sort();

/** The response schema the document gives for `method path` answering `status` as JSON, as an Ajv validator. */
function responseSchema(doc: Doc, path: string, method: string, status: number) {
  const ajv = new Ajv2020({ strict: false, validateFormats: false, allErrors: true });
  ajv.addSchema(doc, 'openapi.json');
  const pointer = `/paths/${path.replace(/~/g, '~0').replace(/\//g, '~1')}/${method}/responses/${status}/content/application~1json/schema`;
  const validate = ajv.getSchema(`openapi.json#${pointer}`);
  assert.ok(validate, `the document describes ${method.toUpperCase()} ${path} → ${status}`);
  return validate;
}

async function assertAnswers(doc: Doc, res: Response, path: string, method: string, status: number): Promise<unknown> {
  const text = await res.text();
  assert.equal(res.status, status, text);
  const body = JSON.parse(text) as unknown;
  const validate = responseSchema(doc, path, method, status);
  assert.ok(validate(body), `${method.toUpperCase()} ${path} → ${status} answers as documented: ${JSON.stringify(validate.errors)}\n${text.slice(0, 500)}`);
  return body;
}

describe('GET /v1/openapi.json', () => {
  it('validates as OpenAPI 3.1 and lists the tenant\'s deployed functions with their input schemas', async () => {
    const doc = await documentFor(acme.key);
    const validator = new Validator();
    const result = await validator.validate(structuredClone(doc) as Parameters<Validator['validate']>[0]);
    assert.equal(result.valid, true, JSON.stringify(result.errors, null, 1));
    assert.equal(validator.version, '3.1');
    assert.doesNotThrow(() => validator.resolveRefs(), 'every $ref resolves');

    assert.deepEqual(runPaths(doc), ['/v1/run/bytesize', '/v1/run/echo', '/v1/run/tree', '/v1/run/{name}']);
    const shown = (await (await as(acme.key)('/v1/functions/bytesize')).json()) as { manifest: { inputSchema: Record<string, unknown> } };
    const { $schema: _dialect, ...stored } = shown.manifest.inputSchema;
    assert.deepEqual(doc.paths['/v1/run/bytesize'].post.requestBody!.content['application/json'].schema, { $ref: '#/components/schemas/function.bytesize.input' });
    assert.deepEqual(doc.components.schemas['function.bytesize.input'], stored);
    assert.ok('application/octet-stream' in doc.paths['/v1/run/bytesize'].post.requestBody!.content, 'its bytes may be the body');
    assert.ok(!('application/octet-stream' in doc.paths['/v1/run/echo'].post.requestBody!.content), 'echo takes JSON only');

    // Its schema checks inputs as the gateway does.
    const ajv = new Ajv2020({ strict: false, validateFormats: false });
    ajv.addSchema(doc, 'openapi.json');
    const tree = ajv.getSchema('openapi.json#/components/schemas/function.tree.input')!;
    assert.equal(tree({ tree: [[], [[]]] }), true);
    assert.equal(tree({ tree: [1] }), false);
  });

  it('shows no tenant another\'s functions; without a key, the routes alone', async () => {
    assert.deepEqual(runPaths(await documentFor(bravo.key)), ['/v1/run/{name}']);
    assert.deepEqual(runPaths(await documentFor(undefined)), ['/v1/run/{name}']);
    assert.deepEqual(runPaths(await documentFor(p.adminKey)), ['/v1/run/{name}'], 'the admin key acts for the default tenant');
    assert.deepEqual(runPaths(await documentFor(p.adminKey, `?tenant=${acme.id}`)), ['/v1/run/bytesize', '/v1/run/echo', '/v1/run/tree', '/v1/run/{name}']);
    assert.equal((await as('emb_nobody')('/v1/openapi.json')).status, 401);
    assert.equal((await as(bravo.key)(`/v1/openapi.json?tenant=${acme.id}`)).status, 403);
  });

  it('follows deploys and deletes', async () => {
    await documentFor(bravo.key);
    await deployFile(new EmbersClient({ url: p.url, apiKey: bravo.key }), shipped('echo.ts'));
    assert.deepEqual(runPaths(await documentFor(bravo.key)), ['/v1/run/echo', '/v1/run/{name}']);
    const res = await as(bravo.key)('/v1/functions/echo', { method: 'DELETE' });
    assert.equal(res.status, 200, await res.text());
    // The delete's registry event reaches the gateway's cache over pub/sub as well.
    await eventually(async () => runPaths(await documentFor(bravo.key)).length === 1, 'echo gone from bravo\'s document');
    assert.deepEqual(runPaths(await documentFor(acme.key)), ['/v1/run/bytesize', '/v1/run/echo', '/v1/run/tree', '/v1/run/{name}']);
  });

  it('describes what the routes answer', async () => {
    const doc = await documentFor(acme.key);
    const call = as(acme.key);
    const json = (body: unknown, headers: Record<string, string> = {}): RequestInit => ({ method: 'POST', body: JSON.stringify(body), headers: { 'content-type': 'application/json', ...headers } });
    await assertAnswers(doc, await call('/v1/functions'), '/v1/functions', 'get', 200);
    await assertAnswers(doc, await call('/v1/functions/echo'), '/v1/functions/{name}', 'get', 200);
    await assertAnswers(doc, await call('/v1/functions/ghost'), '/v1/functions/{name}', 'get', 404);
    await assertAnswers(doc, await call('/v1/run/echo', json({ hi: 1 })), '/v1/run/echo', 'post', 200);
    await assertAnswers(doc, await call('/v1/run/bytesize', { method: 'POST', body: new Uint8Array([1, 2, 3]), headers: { 'content-type': 'application/octet-stream' } }), '/v1/run/bytesize', 'post', 200);
    await assertAnswers(doc, await call('/v1/run/tree', json({ tree: 'no' })), '/v1/run/tree', 'post', 400);
    const job = (await assertAnswers(doc, await call('/v1/run/echo', json({ hi: 2 }, { prefer: 'respond-async' })), '/v1/run/echo', 'post', 202)) as { id: string };
    const done = await eventually(async () => {
      const res = await call(`/v1/jobs/${job.id}`);
      return ((await res.clone().json()) as { status: string }).status === 'succeeded' && res;
    }, 'the job to finish');
    await assertAnswers(doc, done, '/v1/jobs/{id}', 'get', 200);
    await assertAnswers(doc, await call('/v1/batches?limit=0'), '/v1/batches', 'get', 400);
    await assertAnswers(doc, await call('/v1/files?limit=5'), '/v1/files', 'get', 200);
    await assertAnswers(doc, await call('/v1/webhooks/secret'), '/v1/webhooks/secret', 'get', 200);
    await assertAnswers(doc, await call('/v1/usage?granularity=hour'), '/v1/usage', 'get', 200);
    await assertAnswers(doc, await as(p.adminKey)('/v1/tenants'), '/v1/tenants', 'get', 200);
    await assertAnswers(doc, await as(p.adminKey)(`/v1/tenants/${acme.id}/keys`), '/v1/tenants/{id}/keys', 'get', 200);
    await assertAnswers(doc, await as(undefined)('/healthz'), '/healthz', 'get', 200);
  });
});

describe('/docs', () => {
  it('serves the reference page and its assets from the gateway, with their types and a CSP', async () => {
    const page = await fetch(`${p.url}/docs`);
    const html = await page.text();
    assert.equal(page.status, 200);
    assert.equal(page.headers.get('content-type'), 'text/html; charset=utf-8');
    assert.match(page.headers.get('content-security-policy') ?? '', /default-src 'none'; script-src 'self'; /);
    const refs = [...html.matchAll(/(?:src|href)="([^"]+)"/g)].map((m) => m[1]);
    assert.deepEqual(refs.filter((ref) => !ref.startsWith('/docs/')), [], 'only assets of this gateway');
    for (const ref of refs) {
      const asset = await fetch(`${p.url}${ref}`);
      assert.equal(asset.status, 200, ref);
      assert.ok((await asset.arrayBuffer()).byteLength > 0, ref);
    }
    const bundle = await fetch(`${p.url}/docs/swagger-ui-bundle.js`);
    assert.equal(bundle.headers.get('content-type'), 'text/javascript; charset=utf-8');
    assert.match(await bundle.text(), /SwaggerUIBundle/);
  });
});
