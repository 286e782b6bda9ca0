// GET /v1/usage — requests, compute seconds, cold starts and cost per tenant × function × hour or
// day; GET /v1/usage/invoice — a tenant's month per function and version. Cost is as charged: each
// request's at the prices in force where it ran (core/pricing.ts).
import { Hono, type Context } from 'hono';
import { z } from 'zod';
import { readInvoice } from '../../core/invoice.ts';
import { monthOf, parseMonth } from '../../core/months.ts';
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
  cost: z.number().describe('as charged: the sum of each request\'s cost at the prices in force when it ran (a price change applies from then on, never to the past)'),
});

const UsageReportSchema = z.object({ from: z.string(), to: z.string(), granularity: z.enum(['hour', 'day']), data: z.array(UsageRowSchema) });

const InvoiceQuery = z.strictObject({
  month: z.string().optional().describe('`YYYY-MM`, a UTC month (default: the current one); a month not begun is empty'),
  tenant: z.string().optional().describe('the admin key: the tenant (required); a tenant key: its own only'),
});

const Totals = {
  requests: z.number().int(),
  errors: z.number().int().describe('answered 4xx or 5xx'),
  computeSeconds: z.number().describe('handler wall time'),
  coldStartSeconds: z.number().describe('time requests waited for a replica to start'),
  bytesIn: z.number().int(),
  bytesOut: z.number().int(),
  cost: z.number().describe('as charged, at the prices in force when each request ran'),
};

const InvoiceSchema = z
  .object({
    tenant: z.string(),
    month: z.string().describe('`YYYY-MM`'),
    from: z.string().describe('the month\'s start (UTC)'),
    to: z.string().describe('the next month\'s start, not included'),
    lines: z.array(z.object({ function: z.string(), version: z.string(), ...Totals })),
    total: z.object(Totals),
  })
  .meta({ id: 'Invoice' });

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
    const rows = await usageReport(deps.redis, { tenants, from, to, fn: q.function, granularity: q.granularity });
    return c.json({ from: from.toISOString(), to: to.toISOString(), granularity: q.granularity, data: rows } satisfies z.output<typeof UsageReportSchema>);
  });

  app.get('/invoice', async (c) => {
    requireScope(c, 'read');
    const q = readQuery(c, InvoiceQuery, 'invalid_query', 'the parameters are month (YYYY-MM) and tenant');
    const month = q.month === undefined ? monthOf(Date.now()) : parseMonth(q.month);
    if (!month) throw new ApiError(400, 'invalid_month', `month "${q.month}" is not a month; give YYYY-MM, e.g. ${monthOf(Date.now()).replace(/(\d{4})(\d\d)/, '$1-$2')}`);
    return c.json((await readInvoice(deps.redis, invoiceTenant(c, q.tenant), month)) satisfies z.output<typeof InvoiceSchema>);
  });
  return app;
}

/** Whose invoice: a tenant key's own; the admin key's named one. */
function invoiceTenant(c: Context<GatewayEnv>, tenant: string | undefined): string {
  const auth = c.get('auth');
  if (auth.admin) {
    if (tenant === undefined) throw new ApiError(400, 'invalid_query', 'an invoice is one tenant\'s: name it with ?tenant= (the admin key)');
    return tenant;
  }
  if (tenant !== undefined && tenant !== auth.tenant) throw new ApiError(403, 'forbidden', 'a tenant key reads only its own tenant\'s invoice');
  return auth.tenant;
}

export const usageOperations: RouteGroup = {
  tag: 'usage',
  description: 'Metered usage and its cost, as charged: each request carries the prices in force when it ran.',
  operations: [
    {
      method: 'get',
      path: '/',
      id: 'getUsage',
      summary: 'Usage per tenant × function × hour or day',
      access: 'read',
      query: Query,
      description: 'Cost is summed from the requests\' own costs, each at the prices (the version\'s `pricing`, else the platform\'s EMBERS_PRICE_*) in force when it ran: a price change is never applied to the past.',
      responses: { 200: { description: 'the rows of the range', content: { 'application/json': UsageReportSchema } } },
      errors: { 400: '`invalid_query`: an unknown parameter, a date that is not ISO, from not before to, or more than 93 days', 403: 'a tenant key named another tenant' },
    },
    {
      method: 'get',
      path: '/invoice',
      id: 'getInvoice',
      summary: 'A tenant\'s month per function and version',
      description: 'Requests, errors, compute-seconds, cold-start seconds, bytes and cost for a UTC month, per function and version, and their total. Each request is charged at the prices in force when it ran, so a version deployed with new prices mid-month shows its own. Read from roll-ups kept per tenant × month × function × version as requests are metered.',
      access: 'read',
      query: InvoiceQuery,
      responses: { 200: { description: 'the invoice (no lines: no usage that month)', content: { 'application/json': InvoiceSchema } } },
      errors: { 400: '`invalid_month`: not YYYY-MM; `invalid_query`: an unknown parameter, or the admin key without ?tenant=', 403: 'a tenant key named another tenant' },
    },
  ],
};
