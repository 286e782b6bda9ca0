import * as crypto from 'node:crypto';
import type { Context, MiddlewareHandler } from 'hono';
import { z } from 'zod';
import { DEFAULT_TENANT } from '../../core/names.ts';
import { ADMIN_AUTH, TENANT_ID, type Scope, type TenantStore } from '../../core/tenants.ts';
import { ApiError } from '../errors.ts';
import type { GatewayEnv } from '../deps.ts';
import type { KeyCache } from '../key-cache.ts';

/**
 * Digests make a comparison constant-time whatever the lengths. The one-shot hash (Node 20.12+)
 * costs ~1.0 µs against ~1.7 for a Hash object (2.8 % of the gateway's CPU on `echo` in a
 * profile); on 20.10–20.11, which Embers supports, a Hash object.
 */
const digest: (s: string) => Buffer =
  typeof crypto.hash === 'function' ? (s) => crypto.hash('sha256', s, 'buffer') : (s) => crypto.createHash('sha256').update(s).digest();

/** Whether an Authorization header carries the admin key (compared in constant time); none: never. */
export function carriesAdminKey(adminKey: string | undefined): (header: string | undefined) => boolean {
  const admin = adminKey ? digest(adminKey) : undefined;
  return (header) => {
    const m = header ? /^Bearer\s+(\S+)$/i.exec(header) : null;
    return !!admin && !!m && crypto.timingSafeEqual(digest(m[1]), admin);
  };
}

/** Runs, the one route whose enqueue re-checks the key (LiveQueue.add): only they use the key cache. */
const RUN_PATH = '/v1/run/';

/**
 * Bearer-key auth for /v1: sets `c.get('auth')`. The admin key is compared in constant time; any
 * other key is looked up in Redis by its sha256, so a revocation holds at once on every gateway.
 * A run takes a live key from `cache` instead (looking it up only on a miss) and every run's
 * enqueue checks the key again in the same call (`verifyHash`): a key revoked while its request
 * was on its way, cached or not, queues nothing.
 */
export function authenticate(tenants: Pick<TenantStore, 'resolveHash'>, adminKey?: string, cache?: KeyCache): MiddlewareHandler<GatewayEnv> {
  const admin = adminKey ? digest(adminKey) : undefined;
  return async function auth(c, next) {
    const header = c.req.header('authorization');
    if (!header) throw new ApiError(401, 'unauthorized', 'missing "Authorization: Bearer <key>" header (npm start prints the key)');
    const m = /^Bearer\s+(\S+)$/i.exec(header);
    if (!m) throw new ApiError(401, 'unauthorized', 'Authorization header must be "Bearer <key>"');
    // One sha256 per request: compared with the admin key's, and (as hex) the key's lookup id.
    const hashed = digest(m[1]);
    if (admin && crypto.timingSafeEqual(hashed, admin)) {
      c.set('auth', ADMIN_AUTH);
      return next();
    }
    const hash = hashed.toString('hex');
    const run = cache !== undefined && c.req.path.startsWith(RUN_PATH);
    const hit = run ? cache.cached(hash) : undefined;
    const key = hit ?? (run ? await cache.resolve(hash) : await tenants.resolveHash(hash));
    if (!key) throw invalidKey();
    if (key.revokedAt) throw revokedKey(key.id, key.revokedAt);
    c.set('auth', { tenant: key.tenant, keyId: key.id, scopes: key.scopes, admin: false, ...(key.limits ? { limits: key.limits } : {}), ...(run ? { verifyHash: hash } : {}) });
    await next();
  };
}

export const invalidKey = () => new ApiError(401, 'unauthorized', 'invalid API key');

export const revokedKey = (id: string, at?: string) =>
  new ApiError(401, 'unauthorized', `this key was revoked (${id}${at ? `, at ${at}` : ''}); ask your Embers admin for a new one`);

/** 403 unless the caller's key carries `scope`. */
export function requireScope(c: Context<GatewayEnv>, scope: Scope): void {
  const { scopes } = c.get('auth');
  if (!scopes.includes(scope)) {
    throw new ApiError(403, 'forbidden', `this key lacks the "${scope}" scope (it has: ${scopes.join(', ')}); ask your Embers admin for a key with "${scope}"`);
  }
}

/** `?tenant=` as actingTenant reads it; the OpenAPI document gives it to the operations that act for a tenant. */
export const ActingTenantQuery = z.object({
  tenant: z
    .string()
    .regex(TENANT_ID)
    .optional()
    .describe('Admin key only: the tenant to act for (the default tenant when left out). A tenant key acts for its own tenant and may name only that one.'),
});

/**
 * The tenant whose functions a request names: its key's, or for the admin key the one `?tenant=`
 * gives (the default tenant when left out). A tenant key may name only its own.
 */
export function actingTenant(c: Context<GatewayEnv>): string {
  const auth = c.get('auth');
  const asked = c.req.query('tenant');
  if (!auth.admin) {
    if (asked !== undefined && asked !== auth.tenant) throw new ApiError(403, 'forbidden', 'a tenant key acts for its own tenant; ?tenant= names another one only with the admin key');
    return auth.tenant;
  }
  if (asked === undefined) return DEFAULT_TENANT;
  if (!ActingTenantQuery.shape.tenant.safeParse(asked).success) throw new ApiError(400, 'invalid_request', `tenant must be a tenant id (\`embers tenants\` lists them), got "${asked.slice(0, 100)}"`);
  return asked;
}

/** 403 unless the caller used the admin key. */
export function requireAdmin(c: Context<GatewayEnv>): void {
  if (!c.get('auth').admin) throw new ApiError(403, 'forbidden', 'managing tenants and keys needs the admin key (EMBERS_ADMIN_KEY), not a tenant key');
}
