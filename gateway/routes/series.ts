// GET /v1/series — each of a tenant's functions minute by minute (core/series.ts): what the
// console plots, from the platform's own roll-ups.
import { Hono } from 'hono';
import { z } from 'zod';
import { LATENCY_BOUNDS_MS, MAX_MINUTES, readSeries, summarize } from '../../core/series.ts';
import { plainName, qualifiedName } from '../../core/names.ts';
import { actingTenant, ActingTenantQuery, requireScope } from '../middleware/auth.ts';
import type { GatewayDeps, GatewayEnv } from '../deps.ts';
import { readQuery } from '../request-query.ts';
import { functionNotFound } from '../errors.ts';
import type { RouteGroup } from '../openapi/operation.ts';

const Query = z.strictObject({
  minutes: z.coerce.number().int().min(1).max(MAX_MINUTES).default(60).describe(`how many minutes back, the current one included (at most ${MAX_MINUTES})`),
  function: z.string().min(1).optional().describe('one function, by name (default: all of the tenant\'s)'),
  tenant: ActingTenantQuery.shape.tenant,
});

const PointSchema = z.object({
  at: z.string().describe('the start of the minute'),
  requests: z.number().int(),
  errors: z.number().int().describe('answered 4xx or 5xx'),
  serverErrors: z.number().int().describe('answered 5xx'),
  coldStarts: z.number().int().describe('requests that waited for a replica to start'),
  computeMs: z.number().describe('handler time, summed'),
  queueMs: z.number().describe('mean queue wait'),
  p50Ms: z.number().nullable().describe('latency (queue wait and handler time); null without requests'),
  p99Ms: z.number().nullable(),
  latency: z.array(z.number().int()).describe('requests per latency bucket: `latencyBoundsMs`, then slower'),
  depth: z.number().int().nullable().describe('the most requests waiting or running the scheduler saw; null when it did not look (no work)'),
  ready: z.number().int().nullable().describe('the most ready replicas the scheduler saw'),
});

const SummarySchema = z.object({ requests: z.number().int(), perSecond: z.number(), errors: z.number().int(), coldStarts: z.number().int(), p50Ms: z.number().nullable(), p99Ms: z.number().nullable() });

const SeriesSchema = z
  .object({
    minutes: z.number().int(),
    latencyBoundsMs: z.array(z.number()),
    functions: z.array(z.object({ name: z.string(), summary: SummarySchema, points: z.array(PointSchema) })),
  })
  .meta({ id: 'Series' });

export function seriesRoutes(deps: GatewayDeps) {
  const app = new Hono<GatewayEnv>();
  app.get('/', async (c) => {
    requireScope(c, 'read');
    const q = readQuery(c, Query, 'invalid_query', `the parameters are minutes (1 to ${MAX_MINUTES}), function and, with the admin key, tenant`);
    const tenant = actingTenant(c);
    const own = (await deps.registry.list()).filter((f) => f.tenant === tenant).map((f) => f.name);
    const fns = q.function === undefined ? own : own.filter((k) => k === qualifiedName(tenant, q.function!));
    if (q.function !== undefined && fns.length === 0) throw functionNotFound(q.function.slice(0, 100));
    const series = await readSeries(deps.redis, fns, q.minutes);
    return c.json({
      minutes: q.minutes,
      latencyBoundsMs: LATENCY_BOUNDS_MS,
      functions: fns.map((fn) => ({ name: plainName(fn), summary: summarize(series.get(fn)!), points: series.get(fn)! })),
    } satisfies z.output<typeof SeriesSchema>);
  });
  return app;
}

export const seriesOperations: RouteGroup = {
  tag: 'series',
  description: 'Each function minute by minute over the last day: requests, errors, latency, cold starts, queue depth and replicas.',
  operations: [
    {
      method: 'get',
      path: '/',
      id: 'getSeries',
      summary: 'Per-minute series of the tenant\'s functions',
      access: 'read',
      actsForTenant: true,
      query: Query,
      responses: { 200: { description: 'per function, its minutes oldest first and their totals', content: { 'application/json': SeriesSchema } } },
      errors: { 400: '`invalid_query`: an unknown parameter or minutes out of range', 404: '`function_not_found`: no such function of the tenant' },
    },
  ],
};
