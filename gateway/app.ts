// The Hono app: one sub-app per resource, errors mapped in one place.
import { Hono } from 'hono';
import type { GatewayDeps, GatewayEnv } from './deps.ts';
import { authenticate } from './middleware/auth.ts';
import { requestId } from './middleware/request-id.ts';
import { ApiError, notFound, onError } from './errors.ts';
import { functionRoutes } from './routes/functions.ts';
import { modelRoutes } from './routes/models.ts';
import { runRoutes } from './routes/run.ts';
import { jobRoutes } from './routes/jobs.ts';
import { batchRoutes } from './routes/batches.ts';
import { bucketRoutes } from './routes/buckets.ts';
import { fileRoutes } from './routes/files.ts';
import { webhookRoutes } from './webhooks.ts';
import { tenantRoutes } from './routes/tenants.ts';
import { usageRoutes } from './routes/usage.ts';
import { inferenceRoutes } from './routes/inference.ts';
import { sandboxReport } from './sandbox-report.ts';
import { replicasOf } from './replicas.ts';

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

  app.route('/v2', inferenceRoutes(deps));

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
