// The s3:// URIs a caller names (a batch's input, a deploy's models) resolve only inside its
// tenant's space (core/tenant-objects.ts) or in a bucket it registered with its own credentials
// (core/buckets.ts): anything else is reported as missing, exactly as an object that does not
// exist, so nothing tells a tenant what another one holds.
import { checkS3Uri } from '../core/s3.ts';
import { keyOwner } from '../core/tenant-objects.ts';
import { ApiError } from './errors.ts';
import type { GatewayDeps } from './deps.ts';
import { keys } from '../core/keys.ts';

/**
 * ETag and size of the object `uri` names, or null when it does not exist or is not `tenant`'s
 * (alike). A URI that breaks S3's naming rules is a 400 naming `field`. S3's own failures reach
 * the caller as they are.
 */
export async function headOwned(deps: Pick<GatewayDeps, 'stores' | 'redis'>, tenant: string, uri: string, field: string): Promise<{ etag: string; size: number } | null> {
  const loc = checkS3Uri(uri);
  if ('problem' in loc) throw new ApiError(400, 'invalid_request', `${field}: ${loc.problem}`);
  // The platform's credentials reach only its own bucket here; any other bucket is read with
  // the credentials its tenant registered, or not at all.
  const from = await deps.stores.forUri(tenant, uri);
  if (!from) return null;
  if (from === deps.stores.platform) {
    const owner = await keyOwner(loc.key, (id) => deps.redis.hget(keys.batch(id), 'tenant'));
    if (owner !== tenant) return null;
  }
  return from.head(uri);
}
