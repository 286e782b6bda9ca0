// The OpenAPI document on fakes (no Redis, no S3): it validates, describes exactly the routes the
// app has, places stored function schemas where their $refs still resolve, and shows a key only
// its own tenant's functions. The reference page serves local files only.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Validator } from '@seriousme/openapi-schema-validator';
import { Ajv2020 } from 'ajv/dist/2020.js';
import { z } from 'zod';
import type { Manifest } from '../../core/contracts.ts';
import { createLogger } from '../../core/log.ts';
import type { FunctionSummary, Registry } from '../../core/registry.ts';
import { hashSecret, type ApiKey, type TenantStore } from '../../core/tenants.ts';
import { createApp } from '../../gateway/app.ts';
import type { GatewayDeps } from '../../gateway/deps.ts';
import type { FunctionsCache } from '../../gateway/functions-cache.ts';
import { buildDocument, openApiPath, type OpenApiDocument } from '../../gateway/openapi/document.ts';
import { OpenApiDocuments } from '../../gateway/openapi/documents.ts';
import { withFunctions } from '../../gateway/openapi/function-paths.ts';
import { embedSchema, toJsonSchema } from '../../gateway/openapi/json-schema.ts';
import type { RouteGroup } from '../../gateway/openapi/operation.ts';
import { plainTarget } from '../../core/redis-target.ts';

const fake = <T>(part: Partial<T>): T => part as T;

const ADMIN_KEY = 'emb_admin';
const KEYS = new Map<string, ApiKey>([
  [hashSecret('emb_acme'), { id: 'k_acme', tenant: 't_acme', scopes: ['run'], createdAt: '2026-01-01T00:00:00Z' }],
  [hashSecret('emb_bravo'), { id: 'k_bravo', tenant: 't_bravo', scopes: ['run', 'read', 'deploy'], createdAt: '2026-01-01T00:00:00Z' }],
]);

/** A recursive input, as `embers deploy` stores it (zod's JSON Schema of a z.lazy tree). */
type Tree = Tree[];
const Tree: z.ZodType<Tree> = z.lazy(() => z.array(Tree));
const TREE_SCHEMA = z.toJSONSchema(z.object({ tree: Tree }), { io: 'input' }) as Record<string, unknown>;

function manifest(name: string, inputSchema: Record<string, unknown>, binaryInput?: string): Manifest {
  return fake<Manifest>({ name, version: 'v1', inputSchema, ...(binaryInput ? { binaryInput } : {}) });
}

/** Two tenants' functions: acme's echo and tree, bravo's photo (bytes) and its own echo. */
const DEPLOYED = new Map<string, { tenant: string; manifest: Manifest }>([
  ['t_acme.echo', { tenant: 't_acme', manifest: manifest('t_acme.echo', { $schema: 'https://json-schema.org/draft/2020-12/schema', type: 'object', properties: { hello: { type: 'string' } } }) }],
  ['t_acme.tree', { tenant: 't_acme', manifest: manifest('t_acme.tree', TREE_SCHEMA) }],
  ['t_bravo.photo', { tenant: 't_bravo', manifest: manifest('t_bravo.photo', { type: 'object', properties: { image: { not: {} } }, required: ['image'] }, 'image') }],
  ['t_bravo.echo', { tenant: 't_bravo', manifest: manifest('t_bravo.echo', { type: 'object', properties: { bravoOnly: { type: 'string' } } }) }],
]);

function appOnFakes() {
  let listed = 0;
  const listeners: (() => void)[] = [];
  const registry = fake<Registry>({
    list: async () => {
      listed++;
      return [...DEPLOYED].map(([name, f]): FunctionSummary => ({ name, tenant: f.tenant, active: 'v1', versions: 1, updatedAt: '' }));
    },
    active: async (name) => DEPLOYED.get(name)?.manifest ?? null,
  });
  const functions = fake<FunctionsCache>({ onChange: (l) => void listeners.push(l) });
  const deps = fake<GatewayDeps>({ publicUrl: 'http://127.0.0.1:8787', redisTarget: plainTarget('redis://127.0.0.1:1'), registry, functions, tenants: fake<TenantStore>({ resolveHash: async (h) => KEYS.get(h) ?? null }), adminKey: ADMIN_KEY, log: createLogger('test', 'silent') });
  const app = createApp(deps);
  const get = async (path: string, key?: string) => {
    const res = await app.request(path, { headers: key ? { authorization: `Bearer ${key}` } : {} });
    return { res, body: await res.text() };
  };
  const document = async (key?: string, query = '') => {
    const { res, body } = await get(`/v1/openapi.json${query}`, key);
    assert.equal(res.status, 200, body);
    return JSON.parse(body) as OpenApiDocument;
  };
  return { app, get, document, changed: () => listeners.forEach((l) => l()), listed: () => listed };
}

/** Valid OpenAPI 3.1 with every $ref resolving (checked on a copy: resolving them rewrites it). */
async function assertValid(doc: unknown): Promise<void> {
  const validator = new Validator();
  const result = await validator.validate(structuredClone(doc) as Parameters<Validator['validate']>[0]);
  assert.equal(result.valid, true, JSON.stringify(result.errors, null, 1));
  assert.doesNotThrow(() => validator.resolveRefs());
}

describe('the OpenAPI document', () => {
  it('is valid OpenAPI 3.1, without a key, and lists no function', async () => {
    const { document } = appOnFakes();
    const doc = await document();
    await assertValid(doc);
    assert.equal(doc.openapi, '3.1.0');
    assert.equal((doc.servers as { url: string }[])[0].url, 'http://127.0.0.1:8787');
    assert.deepEqual(Object.keys(doc.paths).filter((p) => p.startsWith('/v1/run/')), ['/v1/run/{name}']);
  });

  it('describes exactly the routes the app serves, each with a unique operation id', async () => {
    const { app, document } = appOnFakes();
    const doc = await document();
    // The pages' files and their trailing-slash redirects are the pages' plumbing, not API.
    const served = new Set(app.routes.filter((r) => r.method !== 'ALL' && !r.path.startsWith('/docs/') && !r.path.startsWith('/console/')).map((r) => `${r.method} ${r.path}`));
    const described = new Set(Object.entries(doc.paths).flatMap(([path, item]) => Object.keys(item).map((m) => `${m.toUpperCase()} ${path.replace(/\{([^}]+)\}/g, ':$1')}`)));
    assert.deepEqual([...described].sort(), [...served].sort());
    const ids = Object.values(doc.paths).flatMap((item) => Object.values(item).map((op) => op.operationId));
    assert.equal(new Set(ids).size, ids.length);
  });

  it('takes its parameters and bodies from the routes\' zod schemas, and answers errors as ErrorBody', async () => {
    const doc = await appOnFakes().document();
    const del = doc.paths['/v1/functions/{name}'].delete as { parameters: { name: string; in: string; schema: { enum?: string[]; pattern?: string } }[]; responses: Record<string, { content?: Record<string, { schema: unknown }> }> };
    assert.deepEqual(del.parameters.map((p) => `${p.in} ${p.name}`), ['path name', 'query force', 'query tenant']);
    assert.deepEqual(del.parameters[1].schema.enum, ['true', 'false']);
    assert.deepEqual(del.responses['404'].content!['application/json'].schema, { $ref: '#/components/schemas/Error' });
    const list = doc.paths['/v1/batches'].get as { parameters: { name: string; schema: unknown }[] };
    assert.deepEqual(list.parameters[0], { name: 'limit', in: 'query', required: false, description: 'how many to list, newest first (1–100)', schema: { default: 20, type: 'integer', minimum: 1, maximum: 100 } });
    const deploy = doc.paths['/v1/functions'].post as { requestBody: { content: Record<string, { schema: { required: string[] } }> }; security: unknown };
    // A bare model (spec.kind 'model') has no bundle.
    assert.deepEqual(deploy.requestBody.content['application/json'].schema.required, ['spec']);
    assert.deepEqual(deploy.security, [{ bearerAuth: [] }]);
    assert.deepEqual(doc.paths['/healthz'].get.security, []);
    assert.deepEqual(doc.paths['/v1/openapi.json'].get.security, [{}, { bearerAuth: [] }]);
  });

  it('with a key, adds that tenant\'s functions only, each with its own input schema', async () => {
    const { document } = appOnFakes();
    const acme = await document('emb_acme');
    await assertValid(acme);
    const runPaths = (doc: OpenApiDocument) => Object.keys(doc.paths).filter((p) => p.startsWith('/v1/run/'));
    assert.deepEqual(runPaths(acme), ['/v1/run/{name}', '/v1/run/echo', '/v1/run/tree']);
    const echo = acme.paths['/v1/run/echo'].post as { operationId: string; parameters: { name: string }[]; requestBody: { content: Record<string, { schema: unknown }> } };
    assert.equal(echo.operationId, 'run-echo');
    assert.ok(!echo.parameters.some((p) => p.name === 'name'), 'the name is in the path');
    assert.deepEqual(echo.requestBody.content, { 'application/json': { schema: { $ref: '#/components/schemas/function.echo.input' } } });
    assert.deepEqual(acme.components.schemas['function.echo.input'], { type: 'object', properties: { hello: { type: 'string' } } });
    assert.ok(!JSON.stringify(acme).includes('bravoOnly'), 'nothing of bravo\'s echo');

    const bravo = await document('emb_bravo');
    assert.deepEqual(runPaths(bravo), ['/v1/run/{name}', '/v1/run/echo', '/v1/run/photo']);
    assert.deepEqual(bravo.components.schemas['function.echo.input'], { type: 'object', properties: { bravoOnly: { type: 'string' } } });
    const photo = bravo.paths['/v1/run/photo'].post as { requestBody: { content: Record<string, unknown> } };
    assert.deepEqual(Object.keys(photo.requestBody.content), ['application/json', 'application/octet-stream']);

    // The admin key acts for ?tenant=, else the default tenant (which has none here).
    assert.deepEqual(runPaths(await document(ADMIN_KEY, '?tenant=t_bravo')), ['/v1/run/{name}', '/v1/run/echo', '/v1/run/photo']);
    assert.deepEqual(runPaths(await document(ADMIN_KEY)), ['/v1/run/{name}']);
  });

  it('keeps a recursive input schema\'s $refs resolving where it is placed', async () => {
    const doc = await appOnFakes().document('emb_acme');
    const tree = doc.components.schemas['function.tree.input'];
    assert.match(JSON.stringify(tree), /"\$ref":"#\/components\/schemas\/function\.tree\.input\//);
    const ajv = new Ajv2020({ strict: false, validateFormats: false });
    ajv.addSchema(doc, 'openapi.json');
    const validate = ajv.getSchema('openapi.json#/components/schemas/function.tree.input')!;
    assert.equal(validate({ tree: [[], [[]]] }), true);
    assert.equal(validate({ tree: [[1]] }), false);
  });

  it('refuses a wrong key, a tenant key naming another tenant, and a malformed ?tenant=', async () => {
    const { get } = appOnFakes();
    const status = async (key: string | undefined, query = '') => {
      const { res, body } = await get(`/v1/openapi.json${query}`, key);
      return `${res.status} ${(JSON.parse(body) as { error?: { code: string } }).error?.code ?? ''}`;
    };
    assert.equal(await status('emb_nobody'), '401 unauthorized');
    assert.equal(await status('emb_acme', '?tenant=t_bravo'), '403 forbidden');
    assert.equal(await status(ADMIN_KEY, '?tenant=Not.One'), '400 invalid_request');
  });

  it('is cached per tenant until a function is deployed or deleted', async () => {
    const { document, changed, listed } = appOnFakes();
    await document('emb_acme');
    await document('emb_acme');
    assert.equal(listed(), 1);
    await document('emb_bravo');
    assert.equal(listed(), 2);
    changed();
    await document('emb_acme');
    assert.equal(listed(), 3);
  });
});

describe('document generation', () => {
  const group = (operations: RouteGroup['operations']): RouteGroup => ({ tag: 't', description: 'd', operations });
  const info = { serverUrl: 'http://x', version: '0' };

  it('turns Hono paths into OpenAPI paths', () => {
    assert.equal(openApiPath('/v1/functions', '/'), '/v1/functions');
    assert.equal(openApiPath('/v1/tenants', '/:id/keys/:keyId'), '/v1/tenants/{id}/keys/{keyId}');
    assert.equal(openApiPath('', '/healthz'), '/healthz');
  });

  it('refuses a path parameter its params schema leaves out, and an operation id used twice', () => {
    const op = { method: 'get' as const, path: '/:id', id: 'a', summary: 's', access: 'public' as const, responses: { 200: { description: 'ok' } } };
    assert.throws(() => buildDocument([{ prefix: '/x', group: group([op]) }], info), /a: the path has parameters \[id\], its params schema \[\]/);
    const described = { ...op, params: z.object({ id: z.string() }) };
    assert.throws(() => buildDocument([{ prefix: '/x', group: group([described]) }, { prefix: '/y', group: group([described]) }], info), /two operations have the id a/);
  });

  it('puts named zod schemas under components, the request form as <id>Input', () => {
    const Thing = z.object({ n: z.number().int().default(1) }).meta({ id: 'UnitThing' });
    const out = toJsonSchema(z.object({ a: Thing, b: z.array(Thing) }), 'output');
    assert.deepEqual(out.schema.properties, { a: { $ref: '#/components/schemas/UnitThing' }, b: { type: 'array', items: { $ref: '#/components/schemas/UnitThing' } } });
    assert.deepEqual(out.components.UnitThing.required, ['n']);
    const input = toJsonSchema(z.object({ a: Thing }), 'input');
    assert.deepEqual(input.schema.properties, { a: { $ref: '#/components/schemas/UnitThingInput' } });
    assert.equal(input.components.UnitThingInput.required, undefined);
  });

  it('moves a stored schema\'s own $refs to where it is embedded, and leaves others', () => {
    const stored = { $schema: 'https://json-schema.org/draft/2020-12/schema', type: 'array', items: { $ref: '#' }, $defs: { x: { $ref: '#/$defs/x' } }, also: { $ref: 'https://example.com/s' } };
    assert.deepEqual(embedSchema(stored, '#/components/schemas/f'), { type: 'array', items: { $ref: '#/components/schemas/f' }, $defs: { x: { $ref: '#/components/schemas/f/$defs/x' } }, also: { $ref: 'https://example.com/s' } });
  });

  it('adds functions to a copy: the shared document is left as it is', () => {
    const run = { method: 'post' as const, path: '/:name', id: 'runFunction', summary: 's', access: 'run' as const, params: z.object({ name: z.string() }), responses: { 200: { description: 'ok' } } };
    const base = buildDocument([{ prefix: '/v1/run', group: group([run]) }], info);
    const before = JSON.stringify(base);
    const added = withFunctions(base, [{ name: 'my-fn', version: 'v3', inputSchema: { type: 'object' } }]);
    assert.equal(JSON.stringify(base), before);
    assert.equal((added.paths['/v1/run/my-fn'].post as { operationId: string }).operationId, 'run-my-fn');
  });

  it('builds a tenant\'s document once while nothing changes', async () => {
    let built = 0;
    const documents = new OpenApiDocuments(() => (built++, buildDocument([], info)), async () => []);
    await documents.forTenant('a');
    documents.staticJson();
    assert.equal(built, 1);
  });
});

describe('the reference page', () => {
  it('serves Swagger UI from this gateway: local assets only, each with its type, under a CSP', async () => {
    const { get } = appOnFakes();
    const page = await get('/docs');
    assert.equal(page.res.status, 200);
    assert.equal(page.res.headers.get('content-type'), 'text/html; charset=utf-8');
    const csp = page.res.headers.get('content-security-policy') ?? '';
    assert.match(csp, /default-src 'none'/);
    assert.match(csp, /script-src 'self'(;|$)/);
    const refs = [...page.body.matchAll(/(?:src|href)="([^"]+)"/g)].map((m) => m[1]);
    assert.ok(refs.length >= 4);
    for (const ref of refs) {
      assert.match(ref, /^\/docs\/[\w.-]+$/, `${ref} is served by the gateway`);
      const asset = await get(ref);
      assert.equal(asset.res.status, 200, ref);
      assert.match(asset.res.headers.get('content-type') ?? '', ref.endsWith('.js') ? /^text\/javascript/ : ref.endsWith('.css') ? /^text\/css/ : /^image\/png/);
    }
    assert.ok(!/<script>/.test(page.body), 'no inline script');
    const init = await get('/docs/init.js');
    assert.match(init.body, /url: DOCUMENT/);
    assert.match(init.body, /validatorUrl: null/);
    const missing = await get('/docs/package.json');
    assert.equal(missing.res.status, 404);
    assert.equal((await get('/docs/')).res.headers.get('location'), '/docs');
  });
});
