// The Hono app: one sub-app per resource, each mounted with the operations it describes for
// the OpenAPI document; errors mapped in one place.
import { Hono } from 'hono';
import { z } from 'zod';
import type { GatewayDeps, GatewayEnv } from './deps.ts';
import { authenticate, carriesAdminKey } from './middleware/auth.ts';
import { requestId } from './middleware/request-id.ts';
import { replicatedWrites } from './middleware/replicated.ts';
import { replicationOf } from '../core/redis.ts';
import { ApiError, notFound, onError } from './errors.ts';
import { functionOperations, functionRoutes } from './routes/functions.ts';
import { versionOperations, versionRoutes } from './routes/versions.ts';
import { modelOperations, modelRoutes } from './routes/models.ts';
import { secretOperations, secretRoutes } from './routes/secrets.ts';
import { runRoutes } from './routes/run.ts';
import { runOperations } from './routes/run-operations.ts';
import { jobOperations, jobRoutes } from './routes/jobs.ts';
import { batchOperations, batchRoutes } from './routes/batches.ts';
import { bucketOperations, bucketRoutes } from './routes/buckets.ts';
import { fileOperations, fileRoutes } from './routes/files.ts';
import { webhookOperations, webhookRoutes } from './webhooks.ts';
import { tenantOperations, tenantRoutes } from './routes/tenants.ts';
import { usageOperations, usageRoutes } from './routes/usage.ts';
import { budgetOperations, budgetRoutes } from './routes/budgets.ts';
import { usageExportOperations, usageExportRoutes } from './routes/usage-export.ts';
import { inferenceOperations } from './routes/inference-operations.ts';
import { inferenceRoutes } from './routes/inference.ts';
import { seriesOperations, seriesRoutes } from './routes/series.ts';
import { whoamiOperations, whoamiRoutes } from './routes/whoami.ts';
import { consoleOperations, consoleRoutes } from './console/routes.ts';
import { sandboxReport } from './sandbox-report.ts';
import { refreshClusterGauges } from './scrape.ts';
import type { MountedGroup, RouteGroup } from './openapi/operation.ts';
import { buildDocument } from './openapi/document.ts';
import { OpenApiDocuments } from './openapi/documents.ts';
import { openApiOperations, openApiRoutes } from './openapi/routes.ts';
import { docsOperations, docsRoutes } from './openapi/docs-page.ts';
import { tenantFunctions } from './openapi/tenant-functions.ts';

import { EMBERS_VERSION } from '../core/version.ts';

export function createApp(deps: GatewayDeps) {
  const app = new Hono<GatewayEnv>();
  app.onError(onError(deps.log));
  app.notFound(notFound);
  app.use('*', requestId(deps.log));
  if (deps.redisTarget.ackReplicas > 0) app.use('*', replicatedWrites(deps.redis, deps.redisTarget));

  /** The groups mounted so far: the OpenAPI document describes exactly these. */
  const mounted: MountedGroup[] = [{ prefix: '', group: platformOperations }];
  const mount = (prefix: string, routes: Hono<GatewayEnv>, group: RouteGroup) => {
    app.route(prefix, routes);
    mounted.push({ prefix, group });
  };
  const documents = new OpenApiDocuments(() => buildDocument(mounted, { serverUrl: deps.publicUrl, version: EMBERS_VERSION }), (tenant) => tenantFunctions(deps.registry, tenant));
  deps.functions.onChange(() => documents.changed());

  app.get('/healthz', (c) => c.json({ ok: true }));
  const isAdmin = carriesAdminKey(deps.adminKey);
  app.get('/readyz', async (c) => {
    const [replication, s3] = await Promise.all([replicationOf(deps.redis).catch((e: Error) => e), deps.store.ping().then(() => 'ok', (e: Error) => e.message)]);
    const redis = replication instanceof Error ? replication.message : 'ok';
    const replies = deps.replies.listening ? 'ok' : 'reconnecting';
    const ok = redis === 'ok' && s3 === 'ok' && replies === 'ok';
    // Which Redis serves this gateway (under Sentinel: the primary it was given) and its replicas:
    // the inside of the platform, for the admin's eyes only.
    const redisServer = isAdmin(c.req.header('authorization')) && !(replication instanceof Error) ? { ...replication, sentinel: deps.redisTarget.sentinel?.name } : undefined;
    return c.json({ ok, redis, redisServer, s3, replies, sandbox: await sandboxReport(deps.redis) }, ok ? 200 : 503);
  });
  // Its labels name every tenant's functions (by key: <tenant id>.<name>) and their traffic: the
  // admin key's to read, like the tenant routes, never a tenant's or a stranger's.
  app.get('/metrics', authenticate(deps.tenants, deps.adminKey), async (c) => {
    if (!c.get('auth').admin) throw new ApiError(403, 'forbidden', '/metrics names every tenant\'s functions: scrape it with the admin key (EMBERS_ADMIN_KEY) as a Bearer token');
    await refreshClusterGauges(deps.redis, deps.metrics, deps.log);
    // Only where replicas are expected: a lone Redis has no series, and no alert for it.
    if (deps.redisTarget.sentinel) await replicationOf(deps.redis).then((r) => deps.metrics.redisReplicas.set(r.replicas), () => {});
    return c.text(await deps.metrics.registry.metrics(), 200, { 'content-type': deps.metrics.registry.contentType });
  });

  mount('/v2', inferenceRoutes(deps), inferenceOperations);
  mount('', docsRoutes({ publicUrl: () => deps.publicUrl }), docsOperations);
  mount('', consoleRoutes(), consoleOperations);
  // Before the /v1 auth below: a key is optional here (openapi/routes.ts), and a route that
  // answers ends the chain, so that middleware never runs for it.
  mount('/v1/openapi.json', openApiRoutes(deps, documents), openApiOperations);

  app.use('/v1/*', authenticate(deps.tenants, deps.adminKey, deps.keys));
  mount('/v1/functions', functionRoutes(deps), functionOperations);
  mount('/v1/functions', secretRoutes(deps), secretOperations);
  mount('/v1/functions', versionRoutes(deps), versionOperations);
  mount('/v1/models', modelRoutes(deps), modelOperations);
  mount('/v1/run', runRoutes(deps), runOperations);
  mount('/v1/jobs', jobRoutes(deps), jobOperations);
  mount('/v1/batches', batchRoutes(deps), batchOperations);
  mount('/v1/files', fileRoutes(deps), fileOperations);
  mount('/v1/buckets', bucketRoutes(deps), bucketOperations);
  mount('/v1/webhooks', webhookRoutes(deps), webhookOperations);
  mount('/v1/tenants', tenantRoutes(deps), tenantOperations);
  mount('/v1/tenants', budgetRoutes(deps), budgetOperations);
  mount('/v1/usage', usageRoutes(deps), usageOperations);
  mount('/v1/usage', usageExportRoutes(deps), usageExportOperations);
  mount('/v1/series', seriesRoutes(deps), seriesOperations);
  mount('/v1/whoami', whoamiRoutes(), whoamiOperations);
  return app;
}

const Readiness = z.object({
  ok: z.boolean(),
  redis: z.string(),
  redisServer: z
    .object({ address: z.string(), role: z.string(), replicas: z.number().int(), sentinel: z.string().optional().describe('the master group, under Sentinel') })
    .optional()
    .describe('with the admin key only: the Redis this gateway uses (under Sentinel, the primary it was given) and how many replicas it has'),
  s3: z.string(),
  replies: z.string(),
  sandbox: z.unknown(),
});

/** The routes createApp defines itself. */
export const platformOperations: RouteGroup = {
  tag: 'platform',
  description: 'Health, readiness and metrics.',
  operations: [
    { method: 'get', path: '/healthz', id: 'getHealth', summary: 'Whether the gateway runs', access: 'public', responses: { 200: { description: 'it runs', content: { 'application/json': z.object({ ok: z.literal(true) }) } } } },
    {
      method: 'get',
      path: '/readyz',
      id: 'getReadiness',
      summary: 'Whether the gateway can take work',
      description: 'Redis, S3 and the reply channel each `ok` or why not; `sandbox` says what the nodes can enforce on tenant code. With the admin key, `redisServer` names the Redis in use (under Sentinel: the primary).',
      access: 'public',
      responses: { 200: { description: 'ready', content: { 'application/json': Readiness } }, 503: { description: 'not ready: see which part', content: { 'application/json': Readiness } } },
    },
    {
      method: 'get',
      path: '/metrics',
      id: 'getMetrics',
      summary: 'Prometheus metrics',
      description: 'Its labels name every tenant\'s functions.',
      access: 'admin',
      responses: { 200: { description: 'the Prometheus text format', content: { 'text/plain': { jsonSchema: { type: 'string' } } } } },
    },
  ],
};
