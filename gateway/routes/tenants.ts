// Tenants and their API keys, admin key only: POST/GET /v1/tenants, DELETE /v1/tenants/:id,
// POST/GET /v1/tenants/:id/keys, DELETE /v1/tenants/:id/keys/:keyId.
import { Hono, type Context } from 'hono';
import { limitBody } from '../middleware/body-limit.ts';
import { z } from 'zod';
import { DEFAULT_TENANT } from '../../core/names.ts';
import { CreateKeySchema, CreateTenantSchema, KEY_ID, SCOPES, TENANT_ID, type Tenant } from '../../core/tenants.ts';
import { ApiError } from '../errors.ts';
import { readJson } from '../request-body.ts';
import { requireAdmin } from '../middleware/auth.ts';
import type { GatewayDeps, GatewayEnv } from '../deps.ts';
import type { RouteGroup } from '../openapi/operation.ts';

const MAX_BODY_BYTES = 16 * 1024;

const TenantParams = z.object({ id: z.string().regex(TENANT_ID).describe('`t_…`, or `default`') });
const KeyParams = TenantParams.extend({ keyId: z.string().regex(KEY_ID) });

const TenantSchema = z.object({ id: z.string(), name: z.string(), createdAt: z.string() }).meta({ id: 'Tenant' });

/** ApiKey (core/tenants.ts): never its secret or hash. */
const ApiKeySchema = z
  .object({
    id: z.string(),
    tenant: z.string(),
    name: z.string().optional(),
    scopes: z.array(z.enum(SCOPES)),
    limits: z.object({ rps: z.number().int().optional(), concurrency: z.number().int().optional() }).optional(),
    createdAt: z.string(),
    revokedAt: z.string().optional(),
  })
  .meta({ id: 'ApiKey' });

const CreatedKeySchema = z.object({ ...ApiKeySchema.shape, key: z.string().describe('the secret (`emb_…`): shown in this answer only') });

export function tenantRoutes(deps: Pick<GatewayDeps, 'tenants' | 'maxJsonDepth'>) {
  const app = new Hono<GatewayEnv>();
  const { tenants } = deps;

  app.use('*', async (c, next) => {
    requireAdmin(c);
    await next();
  });
  // Admin bodies are a name and a few options: anything bigger is a mistake, refused before it is read.
  app.use('*', limitBody(MAX_BODY_BYTES, `tenant and key requests are at most ${MAX_BODY_BYTES / 1024} KiB`));

  app.post('/', async (c) => {
    const { name } = parse(CreateTenantSchema, await readJson(c, deps.maxJsonDepth), 'tenant');
    return c.json((await tenants.createTenant(name)) satisfies z.output<typeof TenantSchema>, 201);
  });

  app.get('/', async (c) => c.json({ tenants: await tenants.listTenants() }));

  app.delete('/:id', async (c) => {
    const id = c.req.param('id');
    if (id === DEFAULT_TENANT) throw new ApiError(409, 'default_tenant', 'the default tenant holds the platform key (EMBERS_API_KEY) and cannot be deleted; revoke its keys instead');
    const deleted = TenantParams.shape.id.safeParse(id).success ? await tenants.deleteTenant(id) : null;
    if (!deleted) throw tenantNotFound(id);
    return c.json({ deleted: id, revokedKeys: deleted.revokedKeys });
  });

  app.post('/:id/keys', async (c) => {
    const id = (await existing(c)).id;
    const body = parse(CreateKeySchema, await readJson(c, deps.maxJsonDepth), 'key');
    const created = await tenants.createKey(id, body);
    // The tenant was deleted between the two steps.
    if (!created) throw tenantNotFound(id);
    const { key, secret } = created;
    return c.json({ ...key, key: secret } satisfies z.output<typeof CreatedKeySchema>, 201);
  });

  app.get('/:id/keys', async (c) => {
    const id = (await existing(c)).id;
    return c.json({ keys: (await tenants.listKeys(id)) satisfies z.output<typeof ApiKeySchema>[] });
  });

  app.delete('/:id/keys/:keyId', async (c) => {
    const id = (await existing(c)).id;
    const keyId = c.req.param('keyId');
    const revoked = KeyParams.shape.keyId.safeParse(keyId).success ? await tenants.revokeKey(id, keyId) : null;
    if (!revoked) throw new ApiError(404, 'key_not_found', `tenant ${id} has no key ${keyId}; list them with \`embers keys list ${id}\``);
    return c.json({ revoked: keyId, revokedAt: revoked.key.revokedAt });
  });

  async function existing(c: Context<GatewayEnv>): Promise<Tenant> {
    const id = c.req.param('id') ?? '';
    const tenant = TenantParams.shape.id.safeParse(id).success ? await tenants.getTenant(id) : null;
    if (!tenant) throw tenantNotFound(id);
    return tenant;
  }

  return app;
}

function parse<T>(schema: z.ZodType<T>, body: unknown, what: string): T {
  const parsed = schema.safeParse(body);
  if (!parsed.success) throw new ApiError(400, 'invalid_request', `invalid ${what}: ${z.prettifyError(parsed.error)}`, parsed.error.issues);
  return parsed.data;
}

const tenantNotFound = (id: string) => new ApiError(404, 'tenant_not_found', `no tenant with id "${id}"; list them with \`embers tenants list\``);

const TENANT_NOT_FOUND = { 404: '`tenant_not_found`' };
const BODY_ERRORS = { 400: '`invalid_request`, `invalid_json`', 413: '`too_large`: over 16 KiB' };

export const tenantOperations: RouteGroup = {
  tag: 'tenants',
  description: 'Tenants and their API keys (`embers tenants`, `embers keys`): the admin key only.',
  operations: [
    { method: 'post', path: '/', id: 'createTenant', summary: 'Create a tenant', access: 'admin', body: { content: { 'application/json': CreateTenantSchema } }, responses: { 201: { description: 'created', content: { 'application/json': TenantSchema } } }, errors: BODY_ERRORS },
    { method: 'get', path: '/', id: 'listTenants', summary: 'List tenants', access: 'admin', responses: { 200: { description: 'every tenant', content: { 'application/json': z.object({ tenants: z.array(TenantSchema) }) } } } },
    {
      method: 'delete',
      path: '/:id',
      id: 'deleteTenant',
      summary: 'Delete a tenant',
      description: 'Revokes its keys; its functions stay.',
      access: 'admin',
      params: TenantParams,
      responses: { 200: { description: 'deleted', content: { 'application/json': z.object({ deleted: z.string(), revokedKeys: z.number().int() }) } } },
      errors: { ...TENANT_NOT_FOUND, 409: '`default_tenant`: the default tenant cannot be deleted' },
    },
    {
      method: 'post',
      path: '/:id/keys',
      id: 'createKey',
      summary: 'Create an API key',
      description: 'Scopes left out: all of them. The secret is in this answer only.',
      access: 'admin',
      params: TenantParams,
      body: { content: { 'application/json': CreateKeySchema } },
      responses: { 201: { description: 'created', content: { 'application/json': CreatedKeySchema } } },
      errors: { ...BODY_ERRORS, ...TENANT_NOT_FOUND },
    },
    { method: 'get', path: '/:id/keys', id: 'listKeys', summary: 'List a tenant\'s API keys', access: 'admin', params: TenantParams, responses: { 200: { description: 'its keys, revoked ones too', content: { 'application/json': z.object({ keys: z.array(ApiKeySchema) }) } } }, errors: TENANT_NOT_FOUND },
    {
      method: 'delete',
      path: '/:id/keys/:keyId',
      id: 'revokeKey',
      summary: 'Revoke an API key',
      access: 'admin',
      params: KeyParams,
      responses: { 200: { description: 'revoked: on every gateway at once', content: { 'application/json': z.object({ revoked: z.string(), revokedAt: z.string().optional() }) } } },
      errors: { 404: '`tenant_not_found` or `key_not_found`' },
    },
  ],
};
