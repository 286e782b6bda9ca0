// Which tenant an object of the platform bucket belongs to, judged from its key: every s3:// URI
// a tenant names (a batch's input, a deploy's models) must be one of its own, and anything else
// is answered as if it did not exist.
import { DEFAULT_TENANT } from './names.ts';
import { TENANT_ID } from './tenants.ts';

/**
 * The owner of `key` in the platform bucket, or null when no tenant may name it (functions'
 * bundles and manifests, keys outside every tenant's space). `tenants/<id>/…` is that tenant's;
 * the keys the default tenant wrote before tenants existed (`models/sha256/…`, `files/…`) stay
 * its own; `batches/<id>/…` belongs to the batch's tenant (the default tenant's when its
 * record is gone), which `batchTenant` reads.
 */
export async function keyOwner(key: string, batchTenant: (id: string) => Promise<string | null>): Promise<string | null> {
  const [top, second] = key.split('/', 2);
  if (second === undefined) return null;
  if (top === 'tenants') return TENANT_ID.test(second) && key.length > `tenants/${second}/`.length ? second : null;
  if (top === 'batches') return (await batchTenant(second)) ?? DEFAULT_TENANT;
  if (top === 'files' || (top === 'models' && second === 'sha256')) return DEFAULT_TENANT;
  return null;
}
