// GET /v1/usage/export — a tenant's raw usage records of a period as JSONL, from the files the
// leading scheduler exported to S3 and the records Redis still holds (core/usage-export-read.ts).
import { Hono } from 'hono';
import { z } from 'zod';
import { readUsageExport } from '../../core/usage-export-read.ts';
import { ApiError } from '../errors.ts';
import { ActingTenantQuery, actingTenant, requireScope } from '../middleware/auth.ts';
import type { GatewayDeps, GatewayEnv } from '../deps.ts';
import { readQuery } from '../request-query.ts';
import { jsonLines, type RouteGroup } from '../openapi/operation.ts';

const DAY_MS = 24 * 3_600_000;
const When = z.union([z.iso.datetime({ offset: true }), z.iso.date()]);

// Strict: a misspelt parameter is refused, not read as a default.
const Query = z.strictObject({
  from: When.describe('an ISO date or time: records at or after it'),
  to: When.describe('an ISO date or time, not included; at most 93 days after `from`'),
  tenant: ActingTenantQuery.shape.tenant,
});

/** Lines sent per chunk of the response. */
const CHUNK_BYTES = 64 * 1024;

export function usageExportRoutes(deps: GatewayDeps) {
  const app = new Hono<GatewayEnv>();
  app.get('/export', async (c) => {
    requireScope(c, 'read');
    const q = readQuery(c, Query, 'invalid_query', 'the parameters are from, to (ISO dates or times, e.g. 2026-11-01 or 2026-11-01T12:00:00Z) and tenant');
    const [from, to] = [new Date(q.from), new Date(q.to)];
    if (from >= to) throw new ApiError(400, 'invalid_query', `from (${from.toISOString()}) must be before to (${to.toISOString()})`);
    if (to.getTime() - from.getTime() > 93 * DAY_MS) throw new ApiError(400, 'invalid_query', 'ask for at most 93 days at a time');
    const lines = readUsageExport(deps.redis, deps.store, { tenant: actingTenant(c), fromMs: from.getTime(), toMs: to.getTime() });
    const encoder = new TextEncoder();
    const next = async (): Promise<Uint8Array | null> => {
      let text = '';
      while (text.length < CHUNK_BYTES) {
        const line = await lines.next();
        if (line.done) break;
        text += `${line.value}\n`;
      }
      return text ? encoder.encode(text) : null;
    };
    // The first chunk before the status: Redis or S3 failing at the start is a 5xx, not a cut body.
    let first: Uint8Array | null = await next();
    const body = new ReadableStream<Uint8Array>({
      async pull(controller) {
        const chunk = first ?? (await next());
        first = null;
        if (chunk) controller.enqueue(chunk);
        else controller.close();
      },
      async cancel() {
        await lines.return(undefined);
      },
    });
    c.header('content-type', 'application/x-ndjson');
    return c.body(body);
  });
  return app;
}

export const usageExportOperations: RouteGroup = {
  tag: 'usage',
  description: 'Metered usage and its cost.',
  operations: [
    {
      method: 'get',
      path: '/export',
      id: 'exportUsage',
      summary: 'Raw usage records of a period, one per request',
      description: 'Streamed in time order: the records exported to S3 and those not exported yet, each once. The admin key reads any tenant with `?tenant=`.',
      access: 'read',
      actsForTenant: true,
      query: Query,
      responses: { 200: { description: 'JSONL', content: { 'application/x-ndjson': jsonLines('one usage record per line: `{ "id", "tenant", "key", "fn", "version", "kind", "status", "queueMs", "computeMs", "inferMs", "coldMs", "bytesIn", "bytesOut", "at" }`') } } },
      errors: { 400: '`invalid_query`: an unknown parameter, a date that is not ISO, from not before to, or more than 93 days' },
    },
  ],
};
