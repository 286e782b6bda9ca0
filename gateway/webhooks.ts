// Webhook deliveries: a BullMQ worker in every gateway POSTs a finished async job, or a tenant's
// event (a budget alert: scheduler/budget-alerts.ts), to its webhook, signed per tenant, and
// retries with exponential backoff on any failure.
import { UnrecoverableError, Worker, type Job } from 'bullmq';
import { Hono } from 'hono';
import { z } from 'zod';
import { signWebhook, tenantWebhookSecret, type JobStore, type WebhookDelivery } from '../core/jobs.ts';
import type { Logger } from '../core/log.ts';
import { createRedis } from '../core/redis.ts';
import type { RedisTarget } from '../core/redis-target.ts';
import { closeOrDisconnect } from '../core/settle.ts';
import { refusedTarget } from '../core/webhook-target.ts';
import type { GatewayDeps, GatewayEnv } from './deps.ts';
import { QUEUE_PREFIX, WEBHOOK_QUEUE } from '../core/keys.ts';
import type { RouteGroup } from './openapi/operation.ts';

const DELIVERY_TIMEOUT_MS = 10_000;

export function startWebhookWorker(o: { redisTarget: RedisTarget; jobs: JobStore; secret: string; baseUrl: () => string; log: Logger; allowPrivate?: boolean }): { close(): Promise<void> } {
  const log = o.log.child({ component: 'webhooks' });
  const connection = createRedis(o.redisTarget);
  const worker = new Worker<WebhookDelivery>(
    WEBHOOK_QUEUE,
    async (job: Job<WebhookDelivery>) => {
      const d = job.data;
      let sending: { id: string; tenant: string; body: string; event?: string };
      if ('event' in d) sending = d;
      else {
        const found = await o.jobs.get(d.job, o.baseUrl());
        if (!found || 'expired' in found) return; // nothing left to send
        sending = { id: d.job, tenant: found.tenant, body: JSON.stringify(found.view) };
      }
      // Judged at each delivery, where the host resolves now (not retried: it would fail alike).
      const refused = o.allowPrivate ? null : await refusedTarget(new URL(d.url)).catch((err: Error) => { throw new Error(`cannot resolve the webhook's host: ${err.message}`); });
      if (refused) throw new UnrecoverableError(`webhook not sent: ${refused} (EMBERS_WEBHOOK_ALLOW_PRIVATE=1 allows it)`);
      const { body } = sending;
      const res = await fetch(d.url, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          'user-agent': 'embers-webhooks',
          'embers-webhook-id': sending.id,
          ...(sending.event ? { 'embers-event': sending.event } : {}),
          'embers-signature': signWebhook(tenantWebhookSecret(o.secret, sending.tenant), body),
        },
        body,
        signal: AbortSignal.timeout(DELIVERY_TIMEOUT_MS),
      });
      await res.body?.cancel();
      if (!res.ok) throw new Error(`webhook answered ${res.status}`);
    },
    { connection, prefix: QUEUE_PREFIX, concurrency: 16 },
  );
  worker.on('failed', (job, err) => log.warn({ job: job?.id, url: job?.data.url, attempt: job?.attemptsMade, err: err.message }, 'webhook delivery failed'));
  worker.on('error', (err) => log.warn({ err: err.message }, 'webhook worker error'));
  return {
    async close() {
      // Its Redis client is disconnected either way.
      await closeOrDisconnect(worker, log, 'the webhook worker', 'closing the gateway');
      connection.disconnect();
    },
  };
}

const SecretSchema = z.object({
  tenant: z.string(),
  secret: z.string(),
  header: z.literal('Embers-Signature'),
  scheme: z.string().describe('how the header is made'),
});

/** GET /v1/webhooks/secret: the caller's tenant's signing secret, to verify Embers-Signature. */
export function webhookRoutes(deps: GatewayDeps) {
  const app = new Hono<GatewayEnv>();
  app.get('/secret', (c) =>
    c.json({
      tenant: c.get('auth').tenant,
      secret: tenantWebhookSecret(deps.webhookSecret, c.get('auth').tenant),
      header: 'Embers-Signature',
      scheme: 't=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">',
    } satisfies z.output<typeof SecretSchema>),
  );
  return app;
}

export const webhookOperations: RouteGroup = {
  tag: 'webhooks',
  description: 'Async runs\' webhooks are signed per tenant.',
  operations: [
    {
      method: 'get',
      path: '/secret',
      id: 'getWebhookSecret',
      summary: 'The webhook signing secret',
      description: 'The key\'s tenant\'s secret, to check the `Embers-Signature` header of a webhook: `t=<unix s>,v1=<hex>`, the HMAC-SHA256 of `"<t>.<body>"`.',
      access: 'key',
      responses: { 200: { description: 'the secret', content: { 'application/json': SecretSchema } } },
    },
  ],
};
