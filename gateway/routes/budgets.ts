// PUT/GET/DELETE /v1/tenants/:id/budget — a tenant's monthly budgets, admin key only: the gateway
// refuses its runs once one is reached (gateway/budget-gate.ts), and the leading scheduler calls
// its webhook at 80 % and 100 % (scheduler/budget-alerts.ts).
import { Hono, type Context } from 'hono';
import { z } from 'zod';
import { BudgetSchema } from '../../core/budgets.ts';
import { monthLabel, monthOf } from '../../core/months.ts';
import { TENANT_ID } from '../../core/tenants.ts';
import { ApiError } from '../errors.ts';
import { limitBody } from '../middleware/body-limit.ts';
import { requireAdmin } from '../middleware/auth.ts';
import { readJson } from '../request-body.ts';
import { webhookOf } from '../webhook-url.ts';
import type { GatewayDeps, GatewayEnv } from '../deps.ts';
import type { RouteGroup } from '../openapi/operation.ts';

const MAX_BODY_BYTES = 16 * 1024;

const TenantParams = z.object({ id: z.string().regex(TENANT_ID).describe('`t_…`, or `default`') });

const BudgetView = z
  .object({
    tenant: z.string(),
    monthlySpend: z.number().optional(),
    monthlyComputeSeconds: z.number().optional(),
    webhook: z.string().optional(),
    updatedAt: z.string(),
    monthToDate: z.object({ month: z.string().describe('`YYYY-MM`'), cost: z.number(), computeSeconds: z.number() }).describe('what the tenant used so far this UTC month'),
  })
  .meta({ id: 'Budget' });

export function budgetRoutes(deps: Pick<GatewayDeps, 'tenants' | 'budgetStore' | 'maxJsonDepth' | 'webhookAllowPrivate'>) {
  const app = new Hono<GatewayEnv>();
  const budgets = deps.budgetStore;
  app.use('/:id/budget', async (c, next) => {
    requireAdmin(c);
    await next();
  });
  app.use('/:id/budget', limitBody(MAX_BODY_BYTES, `budget requests are at most ${MAX_BODY_BYTES / 1024} KiB`));

  const view = async (tenant: string) => {
    const month = monthOf(Date.now());
    const { budget: b, mtd } = await budgets.withMonthToDate(tenant, month);
    if (!b) return null;
    return { tenant, ...b, monthToDate: { month: monthLabel(month), cost: Math.round(mtd.cost * 1e6) / 1e6, computeSeconds: Math.round(mtd.computeSeconds * 1e3) / 1e3 } } satisfies z.output<typeof BudgetView>;
  };

  app.put('/:id/budget', async (c) => {
    const id = await existing(c);
    const parsed = BudgetSchema.safeParse(await readJson(c, deps.maxJsonDepth));
    if (!parsed.success) throw new ApiError(400, 'invalid_request', `invalid budget: ${z.prettifyError(parsed.error)}`, parsed.error.issues);
    const webhook = webhookOf(parsed.data.webhook, deps.webhookAllowPrivate ?? false);
    await budgets.put(id, { ...parsed.data, ...(webhook ? { webhook } : {}) });
    return c.json(await view(id));
  });

  app.get('/:id/budget', async (c) => {
    const id = await existing(c);
    const found = await view(id);
    if (!found) throw budgetNotFound(id);
    return c.json(found);
  });

  app.delete('/:id/budget', async (c) => {
    const id = await existing(c);
    if (!(await budgets.delete(id))) throw budgetNotFound(id);
    return c.json({ deleted: id });
  });

  async function existing(c: Context<GatewayEnv>): Promise<string> {
    const id = c.req.param('id') ?? '';
    const tenant = TenantParams.shape.id.safeParse(id).success ? await deps.tenants.getTenant(id) : null;
    if (!tenant) throw new ApiError(404, 'tenant_not_found', `no tenant with id "${id}"; list them with \`embers tenants list\``);
    return tenant.id;
  }
  return app;
}

const budgetNotFound = (id: string) => new ApiError(404, 'budget_not_found', `tenant ${id} has no budget; set one with \`embers tenants budget ${id} --spend N\``);

export const budgetOperations: RouteGroup = {
  tag: 'budgets',
  description: 'Tenants\' monthly budgets (`embers tenants budget`): the admin key only.',
  operations: [
    {
      method: 'put',
      path: '/:id/budget',
      id: 'putBudget',
      summary: 'Set a tenant\'s monthly budgets',
      description: 'Spend (in the unit of the prices) and/or compute-seconds per UTC month, replacing any set before. Once month-to-date usage reaches one, the tenant\'s runs, async runs, batch creations and inferences answer 429 `budget_exhausted`, and a batch already running pauses, until the month ends or the budget is raised; a gateway learns of either within a second, so runs admitted in that second, and those already queued, may go past the budget. `webhook` is called, signed like job webhooks, once when usage reaches 80 % of a budget and once at 100 % (again for a new amount).',
      access: 'admin',
      params: TenantParams,
      body: { content: { 'application/json': BudgetSchema } },
      responses: { 200: { description: 'the budget and the month so far', content: { 'application/json': BudgetView } } },
      errors: { 400: '`invalid_request`: no budget given, or not above 0; `invalid_webhook`; `invalid_json`', 404: '`tenant_not_found`', 413: '`too_large`: over 16 KiB' },
    },
    { method: 'get', path: '/:id/budget', id: 'getBudget', summary: 'A tenant\'s monthly budgets', description: 'With what it used so far this UTC month.', access: 'admin', params: TenantParams, responses: { 200: { description: 'the budget', content: { 'application/json': BudgetView } } }, errors: { 404: '`tenant_not_found` or `budget_not_found`' } },
    { method: 'delete', path: '/:id/budget', id: 'deleteBudget', summary: 'Remove a tenant\'s budgets', description: 'Its runs are admitted again within a second.', access: 'admin', params: TenantParams, responses: { 200: { description: 'removed', content: { 'application/json': z.object({ deleted: z.string() }) } } }, errors: { 404: '`tenant_not_found` or `budget_not_found`' } },
  ],
};
