// /v1/buckets — buckets a tenant registers with its own S3 credentials, so that its batch inputs
// and deploy models may live there (core/buckets.ts). A registration is checked against the bucket
// before it is kept, its secret is sealed, and no answer ever shows it again.
import { Hono, type Context } from 'hono';
import { z } from 'zod';
import { MAX_BUCKETS_PER_TENANT, bucketStore, bucketView, refusedEndpoint, type BucketRecord } from '../../core/buckets.ts';
import { statusOf } from '../../core/s3.ts';
import { bucketNameProblem } from '../../core/s3-uri.ts';
import { DEFAULT_TENANT } from '../../core/names.ts';
import { ApiError } from '../errors.ts';
import { readJson } from '../request-body.ts';
import { actingTenant, requireScope } from '../middleware/auth.ts';
import type { GatewayDeps, GatewayEnv } from '../deps.ts';
import type { RouteGroup } from '../openapi/operation.ts';

const BucketName = z.string().superRefine((b, ctx) => {
  const problem = bucketNameProblem(b);
  if (problem) ctx.addIssue({ code: 'custom', message: problem });
});

const Registration = z.strictObject({
  bucket: BucketName,
  endpoint: z.string().max(2048).optional().describe('an S3-compatible server\'s https:// URL; left out: AWS S3'),
  region: z.string().regex(/^[a-z0-9-]{1,32}$/, 'region is an S3 region name such as us-east-1').default('us-east-1'),
  accessKeyId: z.string().min(1).max(256).regex(/^[\x21-\x7e]+$/, 'accessKeyId holds printable characters only'),
  secretAccessKey: z.string().min(1).max(1024).regex(/^[\x21-\x7e]+$/, 'secretAccessKey holds printable characters only'),
});

const BucketParams = z.object({ bucket: BucketName });

/** BucketView (core/buckets.ts): never the secret, and the key id's last four characters only. */
const BucketSchema = z
  .object({ object: z.literal('bucket'), bucket: z.string(), endpoint: z.string().nullable(), region: z.string(), accessKeyId: z.string().describe('`…` and its last four characters'), createdAt: z.string() })
  .meta({ id: 'Bucket' });

/** How long registering waits for the bucket to answer. */
const CHECK_TIMEOUT_MS = 10_000;

export function bucketRoutes(deps: GatewayDeps) {
  const app = new Hono<GatewayEnv>();
  const { buckets } = deps;

  const tooMany = () => new ApiError(409, 'too_many_buckets', `a tenant registers at most ${MAX_BUCKETS_PER_TENANT} buckets; remove one first (\`embers buckets remove\`)`);
  const notFound = (name: string) => new ApiError(404, 'bucket_not_found', `no registered bucket "${name.slice(0, 63)}"; \`embers buckets list\` shows yours`);

  app.post('/', async (c) => {
    requireScope(c, 'deploy');
    const tenant = actingTenant(c);
    if (tenant !== DEFAULT_TENANT && !(await deps.tenants.getTenant(tenant))) throw new ApiError(404, 'tenant_not_found', `no tenant with id "${tenant}"`);
    if (!buckets.sealer) throw new ApiError(503, 'secrets_not_configured', 'this platform has no EMBERS_SECRETS_KEY, so it cannot keep bucket credentials; its operator sets the same one on every gateway, agent and replica');
    const parsed = Registration.safeParse(await readJson(c, deps.maxJsonDepth));
    if (!parsed.success) throw new ApiError(400, 'invalid_request', `${z.prettifyError(parsed.error)} — send {"bucket", "accessKeyId", "secretAccessKey"}, with "endpoint" (https://…) for an S3-compatible server other than AWS and "region"`);
    const r = parsed.data;
    if (r.bucket === deps.store.bucket) throw new ApiError(400, 'invalid_request', `"${r.bucket}" is the platform's own bucket; upload there with \`embers files upload\` and \`embers models upload\``);
    if (r.endpoint !== undefined) {
      const refused = await refusedEndpoint(r.endpoint, deps.bucketAllowPrivate);
      if (refused) throw new ApiError(400, 'invalid_endpoint', `endpoint: ${refused}`);
    }
    const exists = await buckets.get(tenant, r.bucket);
    if (!exists && (await buckets.count(tenant)) >= MAX_BUCKETS_PER_TENANT) throw tooMany();
    await checkReachable(r);
    const record: BucketRecord = {
      tenant,
      bucket: r.bucket,
      ...(r.endpoint !== undefined ? { endpoint: r.endpoint } : {}),
      region: r.region,
      accessKeyId: r.accessKeyId,
      sealedSecret: buckets.seal(tenant, r.bucket, r.secretAccessKey),
      createdAt: new Date().toISOString(),
    };
    if (!(await buckets.put(record))) throw tooMany();
    c.header('location', `${deps.publicUrl}/v1/buckets/${r.bucket}`);
    return c.json(bucketView(record) satisfies z.output<typeof BucketSchema>, exists ? 200 : 201);
  });

  app.get('/', async (c) => {
    requireScope(c, 'read');
    return c.json({ object: 'list', data: (await buckets.list(actingTenant(c))).map(bucketView) });
  });

  const find = async (c: Context<GatewayEnv>): Promise<BucketRecord> => {
    const name = c.req.param('bucket') ?? '';
    const tenant = actingTenant(c);
    const found = BucketParams.shape.bucket.safeParse(name).success ? await buckets.get(tenant, name) : null;
    if (!found) throw notFound(name);
    return found;
  };

  app.get('/:bucket', async (c) => {
    requireScope(c, 'read');
    return c.json(bucketView(await find(c)));
  });

  app.delete('/:bucket', async (c) => {
    requireScope(c, 'deploy');
    const r = await find(c);
    if (!(await buckets.delete(r.tenant, r.bucket))) throw notFound(r.bucket);
    return c.json({ object: 'bucket', bucket: r.bucket, deleted: true } satisfies z.output<typeof BucketDeletedSchema>);
  });

  return app;
}

const BucketDeletedSchema = z.object({ object: z.literal('bucket'), bucket: z.string(), deleted: z.literal(true) });

const NOT_FOUND = { 404: '`bucket_not_found`: the tenant registered no such bucket' };

export const bucketOperations: RouteGroup = {
  tag: 'buckets',
  description: 'Buckets a tenant registers with its own S3 credentials, for batch `input_uri`s and deploy models.',
  operations: [
    {
      method: 'post',
      path: '/',
      id: 'registerBucket',
      summary: 'Register a bucket',
      description: 'Checked with a HeadBucket before it is kept; the secret is sealed and never shown again. Registering a bucket again replaces its credentials (200).',
      access: 'deploy',
      actsForTenant: true,
      body: { content: { 'application/json': Registration } },
      responses: { 201: { description: 'registered', content: { 'application/json': BucketSchema }, headers: { location: 'the registration\'s URL' } }, 200: { description: 'its credentials replaced', content: { 'application/json': BucketSchema } } },
      errors: {
        400: '`invalid_request`, `invalid_endpoint`, `bucket_not_found`, `bucket_access_denied`, `bucket_unreachable`, `invalid_json`',
        404: '`tenant_not_found`',
        409: '`too_many_buckets`',
        503: '`secrets_not_configured`: the platform has no EMBERS_SECRETS_KEY',
      },
    },
    {
      method: 'get',
      path: '/',
      id: 'listBuckets',
      summary: 'List registered buckets',
      access: 'read',
      actsForTenant: true,
      responses: { 200: { description: 'the tenant\'s buckets', content: { 'application/json': z.object({ object: z.literal('list'), data: z.array(BucketSchema) }) } } },
    },
    { method: 'get', path: '/:bucket', id: 'getBucket', summary: 'Show a registered bucket', access: 'read', actsForTenant: true, params: BucketParams, responses: { 200: { description: 'the registration', content: { 'application/json': BucketSchema } } }, errors: NOT_FOUND },
    { method: 'delete', path: '/:bucket', id: 'removeBucket', summary: 'Remove a registered bucket', access: 'deploy', actsForTenant: true, params: BucketParams, responses: { 200: { description: 'removed', content: { 'application/json': BucketDeletedSchema } } }, errors: NOT_FOUND },
  ],
};

/** The bucket answers a HeadBucket with these credentials, or a 400 saying what it answered. */
async function checkReachable(r: z.infer<typeof Registration>): Promise<void> {
  const store = bucketStore(r, r.secretAccessKey);
  try {
    await store.ping(AbortSignal.timeout(CHECK_TIMEOUT_MS));
  } catch (err) {
    const status = statusOf(err);
    const name = (err as Error).name;
    if (status === 404) throw new ApiError(400, 'bucket_not_found', `bucket ${r.bucket} does not exist${r.endpoint ? ` at ${r.endpoint}` : ` in ${r.region}`}`);
    if (status === 403 || status === 401) throw new ApiError(400, 'bucket_access_denied', `bucket ${r.bucket} refused these credentials (${status}${name && !['Error', 'Unknown', String(status)].includes(name) ? ` ${name}` : ''}); they need s3:ListBucket and s3:GetObject on it`);
    throw new ApiError(400, 'bucket_unreachable', `bucket ${r.bucket} could not be reached${r.endpoint ? ` at ${r.endpoint}` : ''}: ${status ?? (err as Error).message}`);
  } finally {
    store.destroy();
  }
}
