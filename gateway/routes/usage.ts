// GET /v1/usage — requests, compute seconds, cold starts and cost per tenant × function × hour or day.
import { Hono } from 'hono';
import { z } from 'zod';
import { usageReport } from '../../core/usage.ts';
import { ApiError } from '../errors.ts';
import { requireScope } from '../middleware/auth.ts';
import type { GatewayDeps, GatewayEnv } from '../deps.ts';
import { usageKeys } from '../../core/keys.ts';
import { readQuery } from '../request-query.ts';
import type { RouteGroup } from '../openapi/operation.ts';

const DAY_MS = 24 * 3_600_000;
const When = z.union([z.iso.datetime({ offset: true }), z.iso.date()]);

// Strict: a misspelt parameter (?since=) is refused, not read as the default range.
const Query = z.strictObject({
  from: When.optional().describe('an ISO date or time (default: 7 days before `to`)'),
  to: When.optional().describe('an ISO date or time, not included (default: an hour from now); at most 93 days after `from`'),
  function: z.string().optional().describe('one function, by name'),
  granularity: z.enum(['hour', 'day']).default('day'),
  tenant: z.string().optional().describe('admin key: one tenant, or all when left out; a tenant key: its own only'),
});

const UsageRowSchema = z.object({
  tenant: z.string(),
  function: z.string(),
  period: z.string().describe('the start of the hour or day'),
  requests: z.number().int(),
  errors: z.number().int(),
  coldStarts: z.number().int(),
  computeSeconds: z.number(),
  inferSeconds: z.number(),
  queueSeconds: z.number(),
  bytesIn: z.number().int(),
  bytesOut: z.number().int(),
  cost: z.number().describe('requests × perRequest + computeSeconds × perComputeSecond'),
});

const UsageReportSchema = z.object({ from: z.string(), to: z.string(), granularity: z.enum(['hour', 'day']), data: z.array(UsageRowSchema) });

export function usageRoutes(deps: GatewayDeps) {
  const app = new Hono<GatewayEnv>();
  app.get('/', async (c) => {
    requireScope(c, 'read');
    const q = readQuery(c, Query, 'invalid_query', 'the parameters are from, to, function, granularity and tenant; from/to are ISO dates or times (e.g. 2026-11-01 or 2026-11-01T12:00:00Z), granularity is hour or day');
    const to = q.to ? new Date(q.to) : new Date(Date.now() + 3_600_000);
    const from = q.from ? new Date(q.from) : new Date(to.getTime() - 7 * DAY_MS);
    if (from >= to) throw new ApiError(400, 'invalid_query', `from (${from.toISOString()}) must be before to (${to.toISOString()})`);
    if (to.getTime() - from.getTime() > 93 * DAY_MS) throw new ApiError(400, 'invalid_query', 'ask for at most 93 days at a time');
    const auth = c.get('auth');
    if (q.tenant && !auth.admin && q.tenant !== auth.tenant) throw new ApiError(403, 'forbidden', 'a tenant key reads only its own tenant\'s usage');
    const tenants = auth.admin ? (q.tenant ? [q.tenant] : await deps.redis.smembers(usageKeys.tenants)) : [auth.tenant];
    const prices = new Map<string, { perRequest: number; perComputeSecond: number }>();
    for (const fn of new Set((await deps.registry.list()).map((f) => f.name))) {
      const m = await deps.registry.active(fn);
      if (m?.pricing) prices.set(fn, m.pricing);
    }
    const rows = await usageReport(deps.redis, { tenants, from, to, fn: q.function, granularity: q.granularity, pricing: (fn) => prices.get(fn) ?? deps.defaultPricing });
    return c.json({ from: from.toISOString(), to: to.toISOString(), granularity: q.granularity, data: rows } satisfies z.output<typeof UsageReportSchema>);
  });
  return app;
}

export const usageOperations: RouteGroup = {
  tag: 'usage',
  description: 'Metered usage and its cost.',
  operations: [
    {
      method: 'get',
      path: '/',
      id: 'getUsage',
      summary: 'Usage per tenant × function × hour or day',
      access: 'read',
      query: Query,
      responses: { 200: { description: 'the rows of the range', content: { 'application/json': UsageReportSchema } } },
      errors: { 400: '`invalid_query`: an unknown parameter, a date that is not ISO, from not before to, or more than 93 days', 403: 'a tenant key named another tenant' },
    },
  ],
};
