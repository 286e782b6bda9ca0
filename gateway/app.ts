// The Hono app: one sub-app per resource, errors mapped in one place.
import { Hono } from 'hono';
import type { Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import type { BatchStore } from '../core/batches.ts';
import type { BucketRegistry, TenantStores } from '../core/buckets.ts';
import type { FileStore } from '../core/files.ts';
import type { JobStore } from '../core/jobs.ts';
import type { Pricing } from '../core/usage.ts';
import type { QueueDepth, RedisMemory } from './quotas.ts';
import type { Logger } from '../core/log.ts';
import type { Registry } from '../core/registry.ts';
import type { AuthContext, TenantStore } from '../core/tenants.ts';
import type { ObjectStore } from '../core/s3.ts';
import type { FunctionsCache } from './functions-cache.ts';
import type { KeyCache } from './key-cache.ts';
import type { Metrics } from './metrics.ts';
import type { ReplyHub } from './replies.ts';
import { authenticate } from './middleware/auth.ts';
import { requestId } from './middleware/request-id.ts';
import { ApiError, notFound, onError } from './errors.ts';
import { functionRoutes, replicasOf } from './routes/functions.ts';
import { modelRoutes } from './routes/models.ts';
import { runRoutes } from './routes/run.ts';
import type { LiveQueue } from '../core/live-queue.ts';
import { jobRoutes } from './routes/jobs.ts';
import { batchRoutes } from './routes/batches.ts';
import { bucketRoutes } from './routes/buckets.ts';
import { fileRoutes } from './routes/files.ts';
import { webhookRoutes } from './webhooks.ts';
import { tenantRoutes } from './routes/tenants.ts';
import { usageRoutes } from './routes/usage.ts';
import { sandboxReport } from './sandbox-report.ts';

export type GatewayEnv = { Variables: { rid: string; auth: AuthContext } };

export interface GatewayDeps {
  gatewayId: string;
  redis: Redis;
  store: ObjectStore;
  registry: Registry;
  tenants: TenantStore;
  /** Live keys this gateway resolved, for runs (whose enqueue re-checks them). */
  keys: KeyCache;
  /** EMBERS_ADMIN_KEY; without one, no caller is admin. */
  adminKey?: string;
  functions: FunctionsCache;
  replies: ReplyHub;
  /** The functions' live queues (sync and async requests). */
  live: LiveQueue;
  metrics: Metrics;
  log: Logger;
  maxBodyBytes: number;
  maxBundleBytes: number;
  /** Most arrays and objects a JSON body may nest (EMBERS_MAX_JSON_DEPTH); deeper is a 400. */
  maxJsonDepth: number;
  /** Webhooks may reach loopback and private addresses (EMBERS_WEBHOOK_ALLOW_PRIVATE). */
  webhookAllowPrivate?: boolean;
  /**
   * Base of every absolute URL the gateway answers with (EMBERS_PUBLIC_URL, else its listen
   * address), never built from the request's Host header, which is the caller's to write.
   */
  readonly publicUrl: string;
  /** Longest a request waits in its queue before it is answered 504. */
  queueTimeoutMs: number;
  jobs: JobStore;
  batches: BatchStore;
  /** Files API uploads (batch inputs). */
  files: FileStore;
  /** Buckets tenants registered with their own credentials. */
  buckets: BucketRegistry;
  /** Which store reads an s3:// URI a tenant named. */
  stores: TenantStores;
  /** EMBERS_BUCKET_ALLOW_PRIVATE. */
  bucketAllowPrivate: boolean;
  /** Where finished async jobs with a webhook are queued for delivery. */
  webhookQueue: Queue;
  /** Root of the per-tenant webhook signing secrets. */
  webhookSecret: string;
  maxBatchBytes: number;
  queueDepth: QueueDepth;
  /** Refuses runs once Redis's memory nears its budget. */
  redisMemory: RedisMemory;
  /** Prices for usage reports of functions that set none. */
  defaultPricing: Pricing;
  /** Tells the scheduler work arrived for a function (throttled), so a scale from zero starts at once. */
  wake(name: string): void;
}

/** Replica counts by function and state, read from their heartbeats at scrape time. */
async function refreshReplicaGauge(deps: GatewayDeps): Promise<void> {
  deps.metrics.replicas.reset();
  for (const { name } of await deps.registry.list()) {
    const counts: Record<string, number> = { starting: 0, ready: 0, draining: 0, failed: 0 };
    for (const r of (await replicasOf(deps.redis, name)) as { state: string }[]) counts[r.state] = (counts[r.state] ?? 0) + 1;
    for (const [state, n] of Object.entries(counts)) deps.metrics.replicas.set({ function: name, state }, n);
  }
}

export function createApp(deps: GatewayDeps) {
  const app = new Hono<GatewayEnv>();
  app.onError(onError(deps.log));
  app.notFound(notFound);
  app.use('*', requestId(deps.log));

  app.get('/healthz', (c) => c.json({ ok: true }));
  app.get('/readyz', async (c) => {
    const checks = await Promise.all([
      deps.redis.ping().then(() => 'ok', (e: Error) => e.message),
      deps.store.ping().then(() => 'ok', (e: Error) => e.message),
    ]);
    const [redis, s3] = checks;
    const replies = deps.replies.listening ? 'ok' : 'reconnecting';
    const ok = redis === 'ok' && s3 === 'ok' && replies === 'ok';
    return c.json({ ok, redis, s3, replies, sandbox: await sandboxReport(deps.redis) }, ok ? 200 : 503);
  });
  // Its labels name every tenant's functions (by key: <tenant id>.<name>) and their traffic: the
  // admin key's to read, like the tenant routes, never a tenant's or a stranger's.
  app.get('/metrics', authenticate(deps.tenants, deps.adminKey), async (c) => {
    if (!c.get('auth').admin) throw new ApiError(403, 'forbidden', '/metrics names every tenant\'s functions: scrape it with the admin key (EMBERS_ADMIN_KEY) as a Bearer token');
    await refreshReplicaGauge(deps);
    return c.text(await deps.metrics.registry.metrics(), 200, { 'content-type': deps.metrics.registry.contentType });
  });

  app.use('/v1/*', authenticate(deps.tenants, deps.adminKey, deps.keys));
  app.route('/v1/functions', functionRoutes(deps));
  app.route('/v1/models', modelRoutes(deps));
  app.route('/v1/run', runRoutes(deps));
  app.route('/v1/jobs', jobRoutes(deps));
  app.route('/v1/batches', batchRoutes(deps));
  app.route('/v1/files', fileRoutes(deps));
  app.route('/v1/buckets', bucketRoutes(deps));
  app.route('/v1/webhooks', webhookRoutes(deps));
  app.route('/v1/tenants', tenantRoutes(deps));
  app.route('/v1/usage', usageRoutes(deps));
  return app;
}
