// Buckets a tenant registers with its own credentials: batch inputs and deploy models may name
// objects there, read with those credentials and never the platform's. A registration belongs to
// one tenant; to every other tenant (and to a tenant that removed it) its bucket is as unknown as
// any other, and its objects answer as missing ones. The secret key is kept sealed (sealed.ts).
import { createHash } from 'node:crypto';
import type { Redis } from 'ioredis';
import { evalScript } from './redis.ts';
import { ObjectStore, checkS3Uri } from './s3.ts';
import type { Sealer } from './sealed.ts';
import { refusedTarget } from './webhook-target.ts';
import { lua } from './lua.ts';
import { tenantKeys } from './keys.ts';

export interface BucketRecord {
  tenant: string;
  bucket: string;
  /** An S3-compatible server's URL; absent: AWS S3 in `region`. */
  endpoint?: string;
  region: string;
  accessKeyId: string;
  /** The secret access key, sealed for this tenant and bucket. */
  sealedSecret: string;
  createdAt: string;
}

/** What the API shows of a registration: never the secret, and the key id's last four characters only. */
export interface BucketView {
  object: 'bucket';
  bucket: string;
  endpoint: string | null;
  region: string;
  accessKeyId: string;
  createdAt: string;
}

export function bucketView(r: BucketRecord): BucketView {
  return { object: 'bucket', bucket: r.bucket, endpoint: r.endpoint ?? null, region: r.region, accessKeyId: `…${r.accessKeyId.slice(-4)}`, createdAt: r.createdAt };
}

/** Most buckets one tenant may register. */
export const MAX_BUCKETS_PER_TENANT = 100;

const sealContext = (tenant: string, bucket: string) => `bucket:${tenant}:${bucket}`;

const PUT_WITHIN = lua('bucket-put-within');

export class BucketRegistry {
  /** `sealer`: null when EMBERS_SECRETS_KEY is not configured (nothing can be registered or read). */
  constructor(
    private readonly redis: Redis,
    readonly sealer: Sealer | null,
  ) {}

  seal(tenant: string, bucket: string, secret: string): string {
    if (!this.sealer) throw new Error('EMBERS_SECRETS_KEY is not set');
    return this.sealer.seal(secret, sealContext(tenant, bucket));
  }

  /**
   * Keeps the record, unless the tenant already has `max` others: false then. One script, so
   * registrations sent at once cannot all pass the count.
   */
  async put(r: BucketRecord, max = MAX_BUCKETS_PER_TENANT): Promise<boolean> {
    return (await evalScript(this.redis, PUT_WITHIN, 1, tenantKeys.buckets(r.tenant), r.bucket, JSON.stringify(r), max)) === 1;
  }

  async get(tenant: string, bucket: string): Promise<BucketRecord | null> {
    const raw = await this.redis.hget(tenantKeys.buckets(tenant), bucket);
    return raw ? (JSON.parse(raw) as BucketRecord) : null;
  }

  async list(tenant: string): Promise<BucketRecord[]> {
    const all = await this.redis.hvals(tenantKeys.buckets(tenant));
    return all.map((r) => JSON.parse(r) as BucketRecord).sort((a, b) => a.bucket.localeCompare(b.bucket));
  }

  async count(tenant: string): Promise<number> {
    return this.redis.hlen(tenantKeys.buckets(tenant));
  }

  /** True when there was one. */
  async delete(tenant: string, bucket: string): Promise<boolean> {
    return (await this.redis.hdel(tenantKeys.buckets(tenant), bucket)) === 1;
  }

  /** The secret key, or null when it does not open (another EMBERS_SECRETS_KEY, or altered). */
  secretOf(r: BucketRecord): string | null {
    return this.sealer?.open(r.sealedSecret, sealContext(r.tenant, r.bucket)) ?? null;
  }
}

/** Limits on reaching a tenant's S3 server. */
const TIMEOUTS = { connectMs: 5_000, requestMs: 60_000 };

/** A client for a bucket with the credentials given, never the platform's. */
export function bucketStore(r: Pick<BucketRecord, 'bucket' | 'endpoint' | 'region' | 'accessKeyId'>, secretAccessKey: string): ObjectStore {
  return new ObjectStore({ bucket: r.bucket, endpoint: r.endpoint, region: r.region, credentials: { accessKeyId: r.accessKeyId, secretAccessKey }, timeouts: TIMEOUTS });
}

/**
 * Why the platform may not reach `endpoint`, or null: http(s) only, https unless private
 * addresses are allowed, and (as for webhooks) no loopback, private or link-local address unless
 * `allowPrivate` (EMBERS_BUCKET_ALLOW_PRIVATE).
 */
export async function refusedEndpoint(endpoint: string, allowPrivate: boolean): Promise<string | null> {
  let url: URL;
  try {
    url = new URL(endpoint);
  } catch {
    return `"${endpoint.slice(0, 200)}" is not a URL`;
  }
  if (url.protocol !== 'https:' && !(allowPrivate && url.protocol === 'http:')) return `endpoint must be an https:// URL, got ${url.protocol}`;
  if (url.username || url.password) return 'endpoint must not hold credentials; send accessKeyId and secretAccessKey';
  if (allowPrivate) return null;
  try {
    return await refusedTarget(url);
  } catch (err) {
    return `${url.hostname} does not resolve (${(err as { code?: string }).code ?? (err as Error).message})`;
  }
}

/** Registered buckets' clients kept at once (the oldest is dropped). */
const MAX_CLIENTS = 64;

/**
 * Which store reads an s3:// URI a tenant named: the platform's for its own bucket (whose keys
 * gateway/owned-objects.ts judges), the tenant's registered bucket with its credentials, or null
 * (a bucket the tenant did not register: missing). Clients are kept per registration.
 */
export class TenantStores {
  private readonly clients = new Map<string, ObjectStore>();

  constructor(
    readonly platform: ObjectStore,
    private readonly registry: BucketRegistry,
    private readonly allowPrivate: boolean,
  ) {}

  async forUri(tenant: string, uri: string): Promise<ObjectStore | null> {
    const loc = checkS3Uri(uri);
    if ('problem' in loc) return null;
    if (loc.bucket === this.platform.bucket) return this.platform;
    const r = await this.registry.get(tenant, loc.bucket);
    if (!r) return null;
    const id = `${tenant}/${r.bucket}/${r.createdAt}`;
    const kept = this.clients.get(id);
    if (kept) return kept;
    const secret = this.registry.secretOf(r);
    // (Another EMBERS_SECRETS_KEY, or an altered record: the operator's to see, the tenant's to redo.)
    if (secret === null) throw new Error(`the credentials registered for bucket ${r.bucket} cannot be used; register the bucket again (\`embers buckets add\`)`);
    if (r.endpoint) {
      const refused = await refusedEndpoint(r.endpoint, this.allowPrivate);
      if (refused) throw new Error(`bucket ${r.bucket}: ${refused}`);
    }
    if (this.clients.size >= MAX_CLIENTS) this.drop(this.clients.keys().next().value!);
    const store = bucketStore(r, secret);
    this.clients.set(id, store);
    return store;
  }

  close(): void {
    for (const id of [...this.clients.keys()]) this.drop(id);
  }

  private drop(id: string): void {
    this.clients.get(id)?.destroy();
    this.clients.delete(id);
  }
}

/**
 * A name for what `uri` holds in a cache shared by every tenant on a node: an object outside the
 * platform bucket is named by its tenant and where it came from as well as its ETag and size, so
 * a server that answers with another object's ETag cannot be served that object's file.
 */
export function sourceTag(tenant: string, store: ObjectStore, uri: string): string {
  return createHash('sha256').update(`${tenant}\n${store.endpoint ?? 'aws'}\n${uri}`).digest('hex').slice(0, 24);
}
