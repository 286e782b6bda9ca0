// Route handlers through Hono's app.request(), each on fakes of just the dependencies it calls
// (no Redis, no S3): what a caller sees for its mistakes, status, error code and message.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Hono } from 'hono';
import type { Manifest } from '../../core/contracts.ts';
import { createLogger } from '../../core/log.ts';
import type { Registry } from '../../core/registry.ts';
import { hashSecret, type ApiKey, type TenantStore } from '../../core/tenants.ts';
import type { GatewayDeps, GatewayEnv } from '../../gateway/deps.ts';
import { notFound, onError } from '../../gateway/errors.ts';
import type { ActiveFunction, FunctionsCache } from '../../gateway/functions-cache.ts';
import { authenticate } from '../../gateway/middleware/auth.ts';
import { functionRoutes } from '../../gateway/routes/functions.ts';
import { runRoutes } from '../../gateway/routes/run.ts';
import { tenantRoutes } from '../../gateway/routes/tenants.ts';

/** Only the members a test gives: a route that reaches for any other fails on undefined. */
const fake = <T>(part: Partial<T>): T => part as T;

const ADMIN_KEY = 'emb_admin';
const TENANT_KEY = 'emb_acme';
const READ_ONLY_KEY = 'emb_acme_read';
const KEYS = new Map<string, ApiKey>([
  [hashSecret(TENANT_KEY), { id: 'k_run', tenant: 't_acme', scopes: ['run', 'read', 'deploy'], createdAt: '2026-01-01T00:00:00Z' }],
  [hashSecret(READ_ONLY_KEY), { id: 'k_read', tenant: 't_acme', scopes: ['read'], createdAt: '2026-01-01T00:00:00Z' }],
]);

/** `routes` under `path` as createApp mounts them: bearer auth in front, errors in the API's shape. */
function mount(path: string, routes: Hono<GatewayEnv>): Hono<GatewayEnv> {
  const app = new Hono<GatewayEnv>();
  app.onError(onError(createLogger('test', 'silent')));
  app.notFound(notFound);
  app.use('/v1/*', authenticate({ resolveHash: async (hash) => KEYS.get(hash) ?? null }, ADMIN_KEY));
  app.route(path, routes);
  return app;
}

async function call(app: Hono<GatewayEnv>, path: string, o: { method?: string; key?: string; body?: string; type?: string; authorization?: string } = {}) {
  const headers: Record<string, string> = {};
  const authorization = o.authorization ?? (o.key ? `Bearer ${o.key}` : undefined);
  if (authorization) headers.authorization = authorization;
  if (o.type) headers['content-type'] = o.type;
  const res = await app.request(path, { method: o.method ?? 'GET', headers, body: o.body });
  return { status: res.status, error: ((await res.json()) as { error?: { code: string; message: string } }).error };
}

describe('bearer auth in front of /v1', () => {
  const app = mount('/v1/tenants', tenantRoutes({ tenants: fake<TenantStore>({}), maxJsonDepth: 16 }));

  it('answers 401 unauthorized without a key, with a header that is not Bearer, and for a key nobody holds', async () => {
    assert.deepEqual(await call(app, '/v1/tenants'), { status: 401, error: { code: 'unauthorized', message: 'missing "Authorization: Bearer <key>" header (npm start prints the key)' } });
    assert.deepEqual(await call(app, '/v1/tenants', { authorization: 'Basic YWRtaW4=' }), { status: 401, error: { code: 'unauthorized', message: 'Authorization header must be "Bearer <key>"' } });
    assert.deepEqual(await call(app, '/v1/tenants', { key: 'emb_nobody' }), { status: 401, error: { code: 'unauthorized', message: 'invalid API key' } });
  });
});

describe('tenant routes', () => {
  const looked: string[] = [];
  const tenants = fake<TenantStore>({
    getTenant: async (id) => {
      looked.push(id);
      return null;
    },
  });
  const app = mount('/v1/tenants', tenantRoutes({ tenants, maxJsonDepth: 16 }));

  it('refuse a tenant key with 403 forbidden before reading the body', async () => {
    const { status, error } = await call(app, '/v1/tenants', { method: 'POST', key: TENANT_KEY, body: '{"name":', type: 'application/json' });
    assert.equal(status, 403);
    assert.deepEqual(error, { code: 'forbidden', message: 'managing tenants and keys needs the admin key (EMBERS_ADMIN_KEY), not a tenant key' });
  });

  it('answer 400 invalid_json for a body that is empty or does not parse, and 400 invalid_request for one that is no tenant', async () => {
    const post = (body: string) => call(app, '/v1/tenants', { method: 'POST', key: ADMIN_KEY, body, type: 'application/json' });
    assert.deepEqual(await post(''), { status: 400, error: { code: 'invalid_json', message: 'request body is empty; send a JSON object' } });
    const broken = await post('{"name":');
    assert.equal(broken.status, 400);
    assert.equal(broken.error?.code, 'invalid_json');
    assert.match(broken.error?.message ?? '', /^request body is not valid JSON: /);
    const wrong = await post('{"title":"acme"}');
    assert.equal(wrong.status, 400);
    assert.equal(wrong.error?.code, 'invalid_request');
    assert.match(wrong.error?.message ?? '', /^invalid tenant: /);
  });

  it('answer 404 tenant_not_found for a tenant that does not exist, and never look up an id no tenant can have', async () => {
    assert.deepEqual(await call(app, '/v1/tenants/t_ghost/keys', { key: ADMIN_KEY }), { status: 404, error: { code: 'tenant_not_found', message: 'no tenant with id "t_ghost"; list them with `embers tenants list`' } });
    assert.equal((await call(app, '/v1/tenants/Not.An.Id/keys', { key: ADMIN_KEY })).status, 404);
    assert.deepEqual(looked, ['t_ghost']);
  });
});

describe('the run route', () => {
  const echo = fake<ActiveFunction>({ manifest: fake<Manifest>({ name: 't_acme.echo' }), tenant: 't_acme' });
  const found: [string, string][] = [];
  const functions = fake<FunctionsCache>({
    find: async (tenant, name) => {
      found.push([tenant, name]);
      return name === 'echo' ? { key: 't_acme.echo', fn: echo } : null;
    },
    serving: async (f) => f,
    startFailure: () => undefined,
  });
  const app = mount('/v1/run', runRoutes(fake<GatewayDeps>({ functions, maxBodyBytes: 1 << 20, maxJsonDepth: 16 })));
  const run = (name: string, o: { key?: string; body?: string; type?: string } = {}) => call(app, `/v1/run/${name}`, { method: 'POST', key: TENANT_KEY, body: '{}', type: 'application/json', ...o });

  it('answers 404 function_not_found for a name no function can have, without looking it up', async () => {
    found.length = 0;
    assert.deepEqual(await run('Not_A_Name'), { status: 404, error: { code: 'function_not_found', message: 'no function named "Not_A_Name" (names are lower-case letters, digits and "-")' } });
    assert.deepEqual(found, []);
  });

  it("answers 404 function_not_found for a function the caller's tenant does not have", async () => {
    found.length = 0;
    assert.deepEqual(await run('ghost'), { status: 404, error: { code: 'function_not_found', message: 'no function named "ghost"; deploy it with `embers deploy` or list them with `embers functions`' } });
    assert.deepEqual(found, [['t_acme', 'ghost']]);
  });

  it('answers 403 to a key without the run scope, 415 to bytes for a function without binaryInput, 400 invalid_json to JSON that does not parse', async () => {
    const scoped = await run('echo', { key: READ_ONLY_KEY });
    assert.equal(scoped.status, 403);
    assert.equal(scoped.error?.code, 'forbidden');
    const bytes = await run('echo', { body: 'hello', type: 'application/octet-stream' });
    assert.equal(bytes.status, 415);
    assert.equal(bytes.error?.code, 'unsupported_media_type');
    assert.match(bytes.error?.message ?? '', /^echo takes JSON bodies \(Content-Type application\/json\), not application\/octet-stream/);
    const broken = await run('echo', { body: '{"text":' });
    assert.equal(broken.status, 400);
    assert.equal(broken.error?.code, 'invalid_json');
  });
});

describe('the function routes', () => {
  const registry = fake<Registry>({ find: async () => null });
  const app = mount('/v1/functions', functionRoutes(fake<GatewayDeps>({ registry, maxBundleBytes: 1 << 20, maxJsonDepth: 16 })));

  it("answer 404 function_not_found, the name alone, for a function the caller's tenant does not have", async () => {
    assert.deepEqual(await call(app, '/v1/functions/ghost', { key: TENANT_KEY }), { status: 404, error: { code: 'function_not_found', message: 'no function named "ghost"' } });
    assert.deepEqual(await call(app, '/v1/functions/ghost', { method: 'DELETE', key: TENANT_KEY }), { status: 404, error: { code: 'function_not_found', message: 'no function named "ghost"' } });
  });

  it('answer a deploy whose body does not parse 400 invalid_json, and one from a key without the deploy scope 403', async () => {
    const broken = await call(app, '/v1/functions', { method: 'POST', key: TENANT_KEY, body: '{"spec":', type: 'application/json' });
    assert.equal(broken.status, 400);
    assert.equal(broken.error?.code, 'invalid_json');
    const scoped = await call(app, '/v1/functions', { method: 'POST', key: READ_ONLY_KEY, body: '{}', type: 'application/json' });
    assert.equal(scoped.status, 403);
    assert.equal(scoped.error?.code, 'forbidden');
  });
});
