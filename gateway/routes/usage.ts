// GET /v1/usage — requests, compute seconds, cold starts and cost per tenant × function × hour or day.
import { Hono } from 'hono';
import { z } from 'zod';
import { usageReport } from '../../core/usage.ts';
import { ApiError } from '../errors.ts';
import { requireScope } from '../middleware/auth.ts';
import type { GatewayDeps, GatewayEnv } from '../deps.ts';
import { usageKeys } from '../../core/keys.ts';

const DAY_MS = 24 * 3_600_000;
const When = z.union([z.iso.datetime({ offset: true }), z.iso.date()]);

// Strict: a misspelt parameter (?since=) is refused, not read as the default range.
const Query = z.strictObject({
  from: When.optional(),
  to: When.optional(),
  function: z.string().optional(),
  granularity: z.enum(['hour', 'day']).default('day'),
  /** Admin only: one tenant, or all when left out. */
  tenant: z.string().optional(),
});

export function usageRoutes(deps: GatewayDeps) {
  const app = new Hono<GatewayEnv>();
  app.get('/', async (c) => {
    requireScope(c, 'read');
    const parsed = Query.safeParse(c.req.query());
    if (!parsed.success) throw new ApiError(400, 'invalid_query', `${z.prettifyError(parsed.error)} — the parameters are from, to, function, granularity and tenant; from/to are ISO dates or times (e.g. 2026-11-01 or 2026-11-01T12:00:00Z), granularity is hour or day`);
    const q = parsed.data;
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
    return c.json({ from: from.toISOString(), to: to.toISOString(), granularity: q.granularity, data: rows });
  });
  return app;
}
