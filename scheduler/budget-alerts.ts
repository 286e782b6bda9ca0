// Budget alerts, sent by the leading scheduler's pass: for each tenant whose budget has a webhook,
// the month-to-date totals are compared with 80 % and 100 % of each budget (core/budgets.ts:
// crossings), and each share reached is queued once on the webhook queue, signed and retried as
// job webhooks are. Level-judged and remembered per month (budgetKeys.alerted), so a pass missed
// (a leader change, Redis away) sends it at the next, and no write of usage pays for it.
import type { Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import { alertId, BudgetStore, crossings, monthToDate, MTD_FIELDS, type Crossing } from '../core/budgets.ts';
import { enqueueEventWebhook } from '../core/jobs.ts';
import { budgetKeys, usageKeys } from '../core/keys.ts';
import type { Logger } from '../core/log.ts';
import { monthLabel, monthOf } from '../core/months.ts';

/** An alert is remembered a little past its month. */
const ALERTED_TTL_S = 40 * 24 * 3600;

export const BUDGET_EVENT = 'budget.threshold';

/** A budget alert's body, as the tenant's receiver gets it. */
export interface BudgetAlert {
  type: typeof BUDGET_EVENT;
  tenant: string;
  /** YYYY-MM */
  month: string;
  budget: Crossing['kind'];
  /** 0.8 or 1 */
  threshold: number;
  limit: number;
  used: number;
  at: string;
}

export class BudgetAlerts {
  private readonly budgets: BudgetStore;

  constructor(private readonly o: { redis: Redis; webhooks: () => Queue; log: Logger }) {
    this.budgets = new BudgetStore(o.redis);
  }

  async pass(now = Date.now()): Promise<void> {
    const watched = [...(await this.budgets.all())].filter(([, b]) => b.webhook);
    if (watched.length === 0) return;
    const month = monthOf(now);
    const pipe = this.o.redis.pipeline();
    for (const [tenant] of watched) pipe.hmget(usageKeys.month(tenant, month), ...MTD_FIELDS);
    pipe.hgetall(budgetKeys.alerted(month));
    const res = (await pipe.exec()) ?? [];
    const sent = (res[watched.length]?.[1] ?? {}) as Record<string, string>;
    for (const [i, [tenant, budget]] of watched.entries()) {
      const [cost, ms] = (res[i]?.[1] ?? [null, null]) as (string | null)[];
      for (const c of crossings(budget, monthToDate(cost, ms))) {
        const id = alertId(tenant, month, c);
        if (sent[id]) continue;
        const body: BudgetAlert = { type: BUDGET_EVENT, tenant, month: monthLabel(month), budget: c.kind, threshold: c.threshold, limit: c.limit, used: Math.round(c.used * 1e6) / 1e6, at: new Date(now).toISOString() };
        // Queued first: a pass that dies before remembering it queues it again, deduped by its id.
        await enqueueEventWebhook(this.o.webhooks(), { id, event: BUDGET_EVENT, tenant, url: budget.webhook!, body: JSON.stringify(body) });
        await this.o.redis.multi().hset(budgetKeys.alerted(month), id, body.at).expire(budgetKeys.alerted(month), ALERTED_TTL_S).exec();
        this.o.log.info({ tenant, budget: c.kind, threshold: c.threshold, used: body.used, limit: c.limit }, 'budget alert queued');
      }
    }
  }
}
