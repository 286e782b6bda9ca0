// Per-tenant monthly budgets (spend and/or compute-seconds), set by the admin. The gateway refuses
// metered runs of a tenant whose month-to-date usage reached one (gateway/budget-gate.ts); the
// leading scheduler sends a webhook when usage reaches 80 % and 100 % of one
// (scheduler/budget-alerts.ts). Month-to-date usage is the `*|…` totals of the month roll-up
// (core/lua/usage.lua). The decisions here are pure; BudgetStore is their Redis.
import type { Redis } from 'ioredis';
import { z } from 'zod';
import { budgetKeys, usageKeys } from './keys.ts';
import { monthBounds, monthLabel, monthOf } from './months.ts';

export const BudgetSchema = z
  .strictObject({
    monthlySpend: z.number().positive('monthlySpend must be above 0').optional().describe('in the unit of the prices (`pricing`, EMBERS_PRICE_*)'),
    monthlyComputeSeconds: z.number().positive('monthlyComputeSeconds must be above 0').optional().describe('handler wall time, summed'),
    webhook: z.string().optional().describe('called (signed like job webhooks) when usage reaches 80 % and 100 % of a budget'),
  })
  .refine((b) => b.monthlySpend !== undefined || b.monthlyComputeSeconds !== undefined, { message: 'give monthlySpend, monthlyComputeSeconds or both' });

export interface Budget {
  monthlySpend?: number;
  monthlyComputeSeconds?: number;
  webhook?: string;
  updatedAt: string;
}

/** What a tenant used so far in a month. */
export interface MonthToDate {
  cost: number;
  computeSeconds: number;
}

export type BudgetKind = 'monthlySpend' | 'monthlyComputeSeconds';

export const BUDGET_KINDS: BudgetKind[] = ['monthlySpend', 'monthlyComputeSeconds'];

/** Shares of a budget that send a webhook, once each per month and budget amount. */
export const ALERT_AT = [0.8, 1] as const;

export interface BudgetUse {
  kind: BudgetKind;
  limit: number;
  used: number;
}

const usedOf = (kind: BudgetKind, m: MonthToDate) => (kind === 'monthlySpend' ? m.cost : m.computeSeconds);

/** The first budget that month-to-date usage has reached, or null: runs may go on. */
export function exhausted(b: Budget | null, m: MonthToDate): BudgetUse | null {
  if (!b) return null;
  for (const kind of BUDGET_KINDS) {
    const limit = b[kind];
    if (limit !== undefined && usedOf(kind, m) >= limit) return { kind, limit, used: usedOf(kind, m) };
  }
  return null;
}

export interface Crossing extends BudgetUse {
  threshold: (typeof ALERT_AT)[number];
}

/** Every alert share reached so far (level, not edge: the caller remembers which it sent, alertId). */
export function crossings(b: Budget, m: MonthToDate): Crossing[] {
  const out: Crossing[] = [];
  for (const kind of BUDGET_KINDS) {
    const limit = b[kind];
    if (limit === undefined) continue;
    const used = usedOf(kind, m);
    for (const threshold of ALERT_AT) if (used >= threshold * limit) out.push({ kind, limit, used, threshold });
  }
  return out;
}

/** One alert's identity: sent once per tenant, month, budget and amount (raising a budget re-arms its alerts). Used as a BullMQ job id: no `:`. */
export const alertId = (tenant: string, month: string, c: Crossing) => `budget.${tenant}.${month}.${c.kind}.${c.threshold * 100}.${c.limit}`;

/** The refusal's message: which budget, how much of it, and when runs resume (the month's end). */
export function exhaustedMessage(tenant: string, month: string, u: BudgetUse): string {
  const resumesAt = new Date(monthBounds(month).end).toISOString();
  const what = u.kind === 'monthlySpend' ? `spend budget of ${u.limit} (used ${round(u.used)})` : `compute budget of ${u.limit} compute-seconds (used ${round(u.used)})`;
  return `tenant ${tenant} has reached its monthly ${what} for ${monthLabel(month)}; runs resume at ${resumesAt}, or when the admin raises the budget (embers tenants budget ${tenant})`;
}

const round = (n: number) => Math.round(n * 1e4) / 1e4;

const parseBudget = (raw: string | null): Budget | null => (raw ? (JSON.parse(raw) as Budget) : null);

/** Month-to-date totals from the month roll-up's `*|cost` and `*|compute_ms` (null: none yet). */
export const monthToDate = (cost: string | null, computeMs: string | null): MonthToDate => ({ cost: Number(cost ?? 0) || 0, computeSeconds: (Number(computeMs ?? 0) || 0) / 1000 });

/** The fields of the month roll-up monthToDate reads. */
export const MTD_FIELDS = ['*|cost', '*|compute_ms'] as const;

export class BudgetStore {
  constructor(private readonly redis: Redis) {}

  async get(tenant: string): Promise<Budget | null> {
    return parseBudget(await this.redis.hget(budgetKeys.budgets, tenant));
  }

  /** A tenant's budget (null: none) and its use so far in `month`, in one round trip. */
  async withMonthToDate(tenant: string, month: string): Promise<{ budget: Budget | null; mtd: MonthToDate }> {
    const res = await this.redis.pipeline().hget(budgetKeys.budgets, tenant).hmget(usageKeys.month(tenant, month), ...MTD_FIELDS).exec();
    const [[e1, raw], [e2, mtd]] = res as [[Error | null, string | null], [Error | null, (string | null)[]]];
    if (e1 || e2) throw e1 ?? e2;
    return { budget: parseBudget(raw), mtd: monthToDate(mtd[0], mtd[1]) };
  }

  async put(tenant: string, b: Omit<Budget, 'updatedAt'>): Promise<Budget> {
    const budget: Budget = { ...b, updatedAt: new Date().toISOString() };
    await this.redis.hset(budgetKeys.budgets, tenant, JSON.stringify(budget));
    return budget;
  }

  /** True when there was one. */
  async delete(tenant: string): Promise<boolean> {
    return (await this.redis.hdel(budgetKeys.budgets, tenant)) === 1;
  }

  /** Every tenant's budget: few, one per tenant that has one. */
  async all(): Promise<Map<string, Budget>> {
    return new Map(Object.entries(await this.redis.hgetall(budgetKeys.budgets)).map(([t, raw]) => [t, parseBudget(raw)!]));
  }

  /** Why `tenant` may run nothing more at `now` (exhaustedMessage), or null. Reads Redis each call: the gateway caches (gateway/budget-gate.ts). */
  async exhaustedAt(tenant: string, now: number): Promise<string | null> {
    const month = monthOf(now);
    const { budget, mtd } = await this.withMonthToDate(tenant, month);
    const over = exhausted(budget, mtd);
    return over && exhaustedMessage(tenant, month, over);
  }
}
