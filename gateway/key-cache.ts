// API keys this gateway has resolved, so a run costs no key lookup of its own. A cached key is
// only trusted as far as routing goes (tenant, scopes, limits: none of which change once a key
// exists): the request's enqueue checks in the same Redis call that the key is still there and
// not revoked (LiveQueue.add with the key's hash), so a revocation still holds on the very next
// request on every gateway, with no invalidation messages to lose.
import type { ApiKey, TenantStore } from '../core/tenants.ts';

const TTL_MS = 60_000;
/** Most keys kept; the oldest goes first (a Map iterates in insertion order). */
const MAX_ENTRIES = 10_000;

export class KeyCache {
  private readonly entries = new Map<string, { key: ApiKey; at: number }>();

  constructor(private readonly tenants: TenantStore) {}

  /** A live (not revoked) key by its hash, from the cache; undefined when it must be looked up. */
  cached(hash: string): ApiKey | undefined {
    const hit = this.entries.get(hash);
    if (!hit) return undefined;
    if (performance.now() - hit.at < TTL_MS) return hit.key;
    this.entries.delete(hash);
    return undefined;
  }

  /** Looks the key up in Redis; keeps it when it is live (unknown and revoked keys are not kept). */
  async resolve(hash: string): Promise<ApiKey | null> {
    const key = await this.tenants.resolveHash(hash);
    if (key && !key.revokedAt) {
      if (this.entries.size >= MAX_ENTRIES) this.entries.delete(this.entries.keys().next().value!);
      this.entries.set(hash, { key, at: performance.now() });
    }
    return key;
  }

  /** Drops a key the enqueue found revoked or gone. */
  forget(hash: string): void {
    this.entries.delete(hash);
  }
}
