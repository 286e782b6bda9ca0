// A tenant's invoice for a UTC month: its totals per function and version, from the month
// roll-up that the usage-writing Lua call keeps (core/lua/usage.lua), never from the records:
// reading one costs one HGETALL, bounded by the functions × versions the tenant ran that month.
// Cost is as charged: each record's, at the prices in force where it ran (core/pricing.ts).
import type { Redis } from 'ioredis';
import { usageKeys } from './keys.ts';
import { monthBounds, monthLabel } from './months.ts';
import { plainName } from './names.ts';
import { roundCost } from './pricing.ts';

export interface InvoiceTotals {
  requests: number;
  /** Answered 4xx or 5xx. */
  errors: number;
  computeSeconds: number;
  /** Time requests waited for a replica to start. */
  coldStartSeconds: number;
  bytesIn: number;
  bytesOut: number;
  cost: number;
}

export interface InvoiceLine extends InvoiceTotals {
  function: string;
  version: string;
}

export interface Invoice {
  tenant: string;
  /** YYYY-MM */
  month: string;
  from: string;
  to: string;
  lines: InvoiceLine[];
  total: InvoiceTotals;
}

const METRICS: Record<string, keyof InvoiceTotals> = {
  requests: 'requests',
  errors: 'errors',
  compute_ms: 'computeSeconds',
  cold_ms: 'coldStartSeconds',
  bytes_in: 'bytesIn',
  bytes_out: 'bytesOut',
  cost: 'cost',
};

const zero = (): InvoiceTotals => ({ requests: 0, errors: 0, computeSeconds: 0, coldStartSeconds: 0, bytesIn: 0, bytesOut: 0, cost: 0 });

/** Lines and total from a month roll-up's fields (`fn|version|metric`; the `*|metric` totals are the budgets'). */
export function invoiceLines(fields: Record<string, string>): { lines: InvoiceLine[]; total: InvoiceTotals } {
  const lines = new Map<string, InvoiceLine>();
  for (const [field, value] of Object.entries(fields)) {
    const parts = field.split('|');
    if (parts.length !== 3 || !(parts[2] in METRICS)) continue;
    const [fn, version, metric] = parts;
    let line = lines.get(`${fn}|${version}`);
    if (!line) lines.set(`${fn}|${version}`, (line = { function: plainName(fn), version, ...zero() }));
    const n = Number(value) || 0;
    line[METRICS[metric]] += metric.endsWith('_ms') ? n / 1000 : n;
  }
  const total = zero();
  const out = [...lines.values()].sort((a, b) => a.function.localeCompare(b.function) || a.version.localeCompare(b.version, 'en', { numeric: true }));
  for (const line of out) {
    for (const k of Object.keys(total) as (keyof InvoiceTotals)[]) total[k] += line[k];
    tidy(line);
  }
  return { lines: out, total: tidy(total) };
}

/** Sums of float increments read back as decimals: seconds to the microsecond, cost as reports round it. */
function tidy<T extends InvoiceTotals>(t: T): T {
  t.computeSeconds = Math.round(t.computeSeconds * 1e6) / 1e6;
  t.coldStartSeconds = Math.round(t.coldStartSeconds * 1e6) / 1e6;
  t.cost = roundCost(t.cost);
  for (const k of ['requests', 'errors', 'bytesIn', 'bytesOut'] as const) t[k] = Math.round(t[k]);
  return t;
}

/** The tenant's invoice for a `YYYYMM` month (a month not begun, or without usage, has no lines). */
export async function readInvoice(redis: Redis, tenant: string, month: string): Promise<Invoice> {
  const { start, end } = monthBounds(month);
  const { lines, total } = invoiceLines(await redis.hgetall(usageKeys.month(tenant, month)));
  return { tenant, month: monthLabel(month), from: new Date(start).toISOString(), to: new Date(end).toISOString(), lines, total };
}
