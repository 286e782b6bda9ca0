// Tenants and their API keys, admin key only: POST/GET /v1/tenants, DELETE /v1/tenants/:id,
// POST/GET /v1/tenants/:id/keys, DELETE /v1/tenants/:id/keys/:keyId.
import { Hono, type Context } from 'hono';
import { limitBody } from '../middleware/body-limit.ts';
import { z } from 'zod';
import { DEFAULT_TENANT } from '../../core/names.ts';
import { CreateKeySchema, CreateTenantSchema, KEY_ID, TENANT_ID, type Tenant } from '../../core/tenants.ts';
import { ApiError } from '../errors.ts';
import { readJson } from '../request-body.ts';
import { requireAdmin } from '../middleware/auth.ts';
import type { GatewayDeps, GatewayEnv } from '../deps.ts';

const MAX_BODY_BYTES = 16 * 1024;

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
    return c.json(await tenants.createTenant(name), 201);
  });

  app.get('/', async (c) => c.json({ tenants: await tenants.listTenants() }));

  app.delete('/:id', async (c) => {
    const id = c.req.param('id');
    if (id === DEFAULT_TENANT) throw new ApiError(409, 'default_tenant', 'the default tenant holds the platform key (EMBERS_API_KEY) and cannot be deleted; revoke its keys instead');
    const deleted = TENANT_ID.test(id) ? await tenants.deleteTenant(id) : null;
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
    return c.json({ ...key, key: secret }, 201);
  });

  app.get('/:id/keys', async (c) => {
    const id = (await existing(c)).id;
    return c.json({ keys: await tenants.listKeys(id) });
  });

  app.delete('/:id/keys/:keyId', async (c) => {
    const id = (await existing(c)).id;
    const keyId = c.req.param('keyId');
    const revoked = KEY_ID.test(keyId) ? await tenants.revokeKey(id, keyId) : null;
    if (!revoked) throw new ApiError(404, 'key_not_found', `tenant ${id} has no key ${keyId}; list them with \`embers keys list ${id}\``);
    return c.json({ revoked: keyId, revokedAt: revoked.key.revokedAt });
  });

  async function existing(c: Context<GatewayEnv>): Promise<Tenant> {
    const id = c.req.param('id') ?? '';
    const tenant = TENANT_ID.test(id) ? await tenants.getTenant(id) : null;
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
