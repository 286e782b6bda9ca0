// Tenants and their API keys, kept in Redis. A secret is never stored: a key is found by the
// sha256 of its secret, so resolving a bearer key is one HGET (a run's is folded into its enqueue:
// LiveQueue.add), and a revoked key stops working on every gateway at once.
import { createHash, randomBytes } from 'node:crypto';
import type { Redis } from 'ioredis';
import { z } from 'zod';
import { evalScript } from './redis.ts';
import { DEFAULT_TENANT } from './names.ts';
import { lua } from './lua.ts';
import { tenantKeys } from './keys.ts';

export const SCOPES = ['run', 'deploy', 'read'] as const;
export type Scope = (typeof SCOPES)[number];

/** Who is calling: resolved from the bearer key by the gateway's auth middleware (`c.get('auth')`). */
export interface AuthContext {
  tenant: string;
  keyId: string;
  scopes: Scope[];
  /** The platform admin key (EMBERS_ADMIN_KEY): manages tenants and keys, reaches every tenant's functions. */
  admin: boolean;
  /** Per-key quotas (absent: unlimited). */
  limits?: KeyLimits;
  /**
   * Set for runs: the key's sha256 (hex), which the request's enqueue must find live in Redis
   * (LiveQueue.add), so a revocation holds even when the gateway took the key from its cache.
   */
  verifyHash?: string;
}

export interface KeyLimits {
  /** Requests per second to /v1/run, over every gateway. */
  rps?: number;
  /** Synchronous runs of this key in flight at once, over every gateway. */
  concurrency?: number;
}

export interface Tenant {
  id: string;
  name: string;
  createdAt: string;
}

export interface ApiKey {
  id: string;
  tenant: string;
  name?: string;
  scopes: Scope[];
  limits?: KeyLimits;
  createdAt: string;
  revokedAt?: string;
}

/** Key id of EMBERS_API_KEY (or the key `embers dev` generates) inside the default tenant. */
export const DEFAULT_KEY_ID = 'default';

export const ADMIN_AUTH: AuthContext = Object.freeze({ tenant: DEFAULT_TENANT, keyId: 'admin', scopes: [...SCOPES], admin: true });

/** Tenant ids and key ids end up in Redis keys and URLs. */
export const TENANT_ID = /^[a-z0-9][a-z0-9_-]{0,62}$/;
export const KEY_ID = TENANT_ID;

export const CreateTenantSchema = z.strictObject({
  name: z.string().trim().min(1, 'name must not be empty').max(100, 'name is at most 100 characters'),
});

export const CreateKeySchema = z.strictObject({
  name: z.string().trim().min(1, 'name must not be empty').max(100, 'name is at most 100 characters').optional(),
  scopes: z
    .array(z.enum(SCOPES, { error: `scopes are ${SCOPES.map((s) => `"${s}"`).join(', ')}` }))
    .min(1, 'give at least one scope, or leave scopes out for all of them')
    .optional(),
  limits: z
    .strictObject({
      rps: z.number().int().min(1, 'limits.rps must be at least 1').optional(),
      concurrency: z.number().int().min(1, 'limits.concurrency must be at least 1').optional(),
    })
    .optional(),
});

/** A new key secret: `emb_` + 32 random bytes, base64url. */
export function newSecret(): string {
  return `emb_${randomBytes(32).toString('base64url')}`;
}

export function hashSecret(secret: string): string {
  return createHash('sha256').update(secret).digest('hex');
}

/** Whether a caller may see and touch something its owner tenant holds. */
export function canAccess(auth: AuthContext, owner: string): boolean {
  return auth.admin || auth.tenant === owner;
}

const CREATE_KEY = lua('tenant-create-key');

export class TenantStore {
  constructor(private readonly redis: Redis) {}

  async createTenant(name: string): Promise<Tenant> {
    const tenant: Tenant = { id: `t_${randomBytes(6).toString('hex')}`, name, createdAt: new Date().toISOString() };
    await this.redis.hset(tenantKeys.tenants, tenant.id, JSON.stringify(tenant));
    return tenant;
  }

  async getTenant(id: string): Promise<Tenant | null> {
    const raw = await this.redis.hget(tenantKeys.tenants, id);
    return raw ? (JSON.parse(raw) as Tenant) : null;
  }

  async listTenants(): Promise<Tenant[]> {
    const all = Object.values(await this.redis.hgetall(tenantKeys.tenants)).map((r) => JSON.parse(r) as Tenant);
    return all.sort((a, b) => a.createdAt.localeCompare(b.createdAt) || a.id.localeCompare(b.id));
  }

  /** Deletes a tenant and revokes its keys; null when there is no such tenant. Its functions stay. */
  async deleteTenant(id: string): Promise<{ revokedKeys: number } | null> {
    // Removed first: from here on no key can be created for it (CREATE_KEY checks).
    if ((await this.redis.hdel(tenantKeys.tenants, id)) === 0) return null;
    let revokedKeys = 0;
    for (const keyId of await this.redis.hkeys(tenantKeys.tenantKeys(id))) {
      const r = await this.revokeKey(id, keyId);
      if (r?.newlyRevoked) revokedKeys++;
    }
    // Its registered buckets' sealed credentials go with it.
    await this.redis.del(tenantKeys.buckets(id));
    return { revokedKeys };
  }

  /** A new key for an existing tenant, with its secret (shown to the caller once); null when the tenant does not exist. */
  async createKey(tenant: string, o: { name?: string; scopes?: Scope[]; limits?: KeyLimits } = {}): Promise<{ key: ApiKey; secret: string } | null> {
    const secret = newSecret();
    const key: ApiKey = {
      id: `key_${randomBytes(6).toString('hex')}`,
      tenant,
      ...(o.name ? { name: o.name } : {}),
      scopes: SCOPES.filter((s) => (o.scopes ?? SCOPES).includes(s)),
      ...(o.limits && Object.keys(o.limits).length ? { limits: o.limits } : {}),
      createdAt: new Date().toISOString(),
    };
    const hash = hashSecret(secret);
    const created = await evalScript(this.redis, CREATE_KEY, 3, tenantKeys.tenants, tenantKeys.keysByHash, tenantKeys.tenantKeys(tenant), tenant, hash, key.id, JSON.stringify(key));
    return created === 1 ? { key, secret } : null;
  }

  async listKeys(tenant: string): Promise<ApiKey[]> {
    const hashes = Object.values(await this.redis.hgetall(tenantKeys.tenantKeys(tenant)));
    if (hashes.length === 0) return [];
    const records = await this.redis.hmget(tenantKeys.keysByHash, ...hashes);
    return records
      .filter((r): r is string => r !== null)
      .map((r) => JSON.parse(r) as ApiKey)
      .sort((a, b) => a.createdAt.localeCompare(b.createdAt) || a.id.localeCompare(b.id));
  }

  /** Marks a key revoked (idempotent: an already revoked key keeps its time); null when the tenant has no such key. */
  async revokeKey(tenant: string, keyId: string): Promise<{ key: ApiKey; newlyRevoked: boolean } | null> {
    const hash = await this.redis.hget(tenantKeys.tenantKeys(tenant), keyId);
    const raw = hash && (await this.redis.hget(tenantKeys.keysByHash, hash));
    if (!hash || !raw) return null;
    const key = JSON.parse(raw) as ApiKey;
    if (key.revokedAt) return { key, newlyRevoked: false };
    const revoked: ApiKey = { ...key, revokedAt: new Date().toISOString() };
    await this.redis.hset(tenantKeys.keysByHash, hash, JSON.stringify(revoked));
    return { key: revoked, newlyRevoked: true };
  }

  /** The key a secret belongs to (revoked ones included, so callers can say so), or null. */
  async resolve(secret: string): Promise<ApiKey | null> {
    return this.resolveHash(hashSecret(secret));
  }

  /** resolve() for a secret already hashed (hashSecret): the gateway hashes each key once. */
  async resolveHash(hash: string): Promise<ApiKey | null> {
    const raw = await this.redis.hget(tenantKeys.keysByHash, hash);
    return raw ? (JSON.parse(raw) as ApiKey) : null;
  }

  /**
   * Makes the platform's own key (EMBERS_API_KEY, or the one `embers dev` generates) a key of the
   * default tenant with every scope. A changed key replaces the previous one; a key an admin
   * revoked stays revoked.
   */
  async bootstrapDefault(secret: string): Promise<{ key: ApiKey; replaced: boolean }> {
    const taken = await this.resolve(secret);
    if (taken && (taken.tenant !== DEFAULT_TENANT || taken.id !== DEFAULT_KEY_ID)) {
      throw new Error(`EMBERS_API_KEY is already key ${taken.id} of tenant ${taken.tenant}; give the platform a key of its own`);
    }
    const now = new Date().toISOString();
    const tenant: Tenant = { id: DEFAULT_TENANT, name: DEFAULT_TENANT, createdAt: now };
    const record: ApiKey = { id: DEFAULT_KEY_ID, tenant: DEFAULT_TENANT, name: 'EMBERS_API_KEY', scopes: [...SCOPES], createdAt: now };
    const hash = hashSecret(secret);
    const previous = await this.redis.hget(tenantKeys.tenantKeys(DEFAULT_TENANT), DEFAULT_KEY_ID);
    const replaced = previous !== null && previous !== hash;
    const multi = this.redis.multi().hsetnx(tenantKeys.tenants, DEFAULT_TENANT, JSON.stringify(tenant));
    if (replaced) multi.hdel(tenantKeys.keysByHash, previous);
    await multi.hsetnx(tenantKeys.keysByHash, hash, JSON.stringify(record)).hset(tenantKeys.tenantKeys(DEFAULT_TENANT), DEFAULT_KEY_ID, hash).exec();
    return { key: taken ?? record, replaced };
  }
}
