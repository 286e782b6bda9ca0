// Function names are per tenant: two tenants may each have an `ocr`. Below the gateway (Redis
// keys, live streams, the batch queue, S3 keys, the scheduler, replicas) a function goes by one
// string, its key; the gateway turns (tenant, name) into it and never shows one tenant another's.
/** The tenant of the platform's own API key, and of everything deployed before there were tenants. */
export const DEFAULT_TENANT = 'default';

/**
 * The key of `tenant`'s function `name`. The default tenant's functions keep their plain name, so
 * what was deployed before names were per tenant stays where it is; "." is in neither a function
 * name nor a tenant id, so no two (tenant, name) pairs share a key.
 */
export function qualifiedName(tenant: string, name: string): string {
  return tenant === DEFAULT_TENANT ? name : `${tenant}.${name}`;
}

/** The name a function's tenant knows it by: its key without the tenant (nor a version key's version). */
export function plainName(key: string): string {
  return baseKey(key).slice(key.indexOf('.') + 1);
}

/**
 * The key of one version of a function while it takes a share of its traffic (core/traffic.ts):
 * `<key>@<version>`, with a live stream, scale state and replicas of its own. "@" is in no function
 * name, tenant id or version, so no tenant can name it: only the gateway routes to it.
 */
export function versionKey(key: string, version: string): string {
  return `${key}@${version}`;
}

/** The function a key belongs to: a version key's function, any other key itself. */
export function baseKey(key: string): string {
  const at = key.indexOf('@');
  return at < 0 ? key : key.slice(0, at);
}

/** The version a version key pins, or null for a function's own key. */
export function pinnedVersion(key: string): string | null {
  const at = key.indexOf('@');
  return at < 0 ? null : key.slice(at + 1);
}

/**
 * Where `tenant`'s function `name` is, given `lookup` (a key's function with the tenant that owns
 * it, or null): at its qualified name, or, deployed by a tenant other than the default while
 * names were global, at its plain name. Null when the tenant has none by that name, whoever else
 * has one.
 */
export async function findOwned<T extends { tenant: string }>(tenant: string, name: string, lookup: (key: string) => Promise<T | null>): Promise<{ key: string; fn: T } | null> {
  const key = qualifiedName(tenant, name);
  const fn = await lookup(key);
  if (fn?.tenant === tenant) return { key, fn };
  if (key === name) return null;
  const legacy = await lookup(name);
  return legacy?.tenant === tenant ? { key: name, fn: legacy } : null;
}
