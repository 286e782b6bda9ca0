// Admission by monthly budget (core/budgets.ts): a run billed to a tenant whose month-to-date
// usage reached one of its budgets is answered 429 budget_exhausted, Retry-After the seconds to
// the end of the UTC month. Per tenant, the budget and the month's totals are read together (one
// pipelined round trip) at most once a second per gateway, and requests in between are judged on
// that read. So a tenant may overshoot a budget by what its runs admitted in that second, on
// every gateway, and what was already queued or running, cost: totals grow only as requests
// finish.
import type { Redis } from 'ioredis';
import { BudgetStore, exhausted, exhaustedMessage, type Budget, type MonthToDate } from '../core/budgets.ts';
import { monthBounds, monthOf, secondsToMonthEnd } from '../core/months.ts';
import { refusal } from './quotas.ts';

/** How long one read of a tenant's budget and totals judges its runs. */
export const BUDGET_FRESH_MS = 1_000;

interface Seen {
  month: string;
  budget: Budget | null;
  mtd: MonthToDate;
  /** When it was read (this.clock). */
  at: number;
}

export class BudgetGate {
  private readonly seen = new Map<string, Seen>();
  private readonly reading = new Map<string, Promise<Seen>>();
  private readonly budgets: BudgetStore;

  constructor(
    redis: Redis,
    /** Wall time: which month it is. */
    private readonly now: () => number = Date.now,
    private readonly clock: () => number = () => performance.now(),
  ) {
    this.budgets = new BudgetStore(redis);
  }

  /**
   * Throws 429 budget_exhausted when `tenant` (the one billed) reached a monthly budget. Judged
   * without a promise while its last read is fresh: every run passes here.
   */
  check(tenant: string): void | Promise<void> {
    const s = this.seen.get(tenant);
    if (s && this.clock() - s.at < BUDGET_FRESH_MS && s.month === this.month()) return this.judge(tenant, s);
    return this.read(tenant, this.month()).then((read) => this.judge(tenant, read));
  }

  private judge(tenant: string, s: Seen): void {
    const over = exhausted(s.budget, s.mtd);
    if (!over) return;
    throw refusal(429, 'budget_exhausted', exhaustedMessage(tenant, s.month, over), secondsToMonthEnd(this.now()));
  }

  private current = { month: '', until: -Infinity };

  /** The UTC month now, worked out again only once it ends. */
  private month(): string {
    const now = this.now();
    if (now >= this.current.until || now < this.current.until - 32 * 86_400_000) {
      const month = monthOf(now);
      this.current = { month, until: monthBounds(month).end };
    }
    return this.current.month;
  }

  /** One read per tenant at a time; the requests that come meanwhile wait for it. Never rejects. */
  private read(tenant: string, month: string): Promise<Seen> {
    let r = this.reading.get(tenant);
    if (!r) {
      r = this.budgets
        .withMonthToDate(tenant, month)
        .then(({ budget, mtd }) => {
          const s: Seen = { month, budget, mtd, at: this.clock() };
          this.seen.set(tenant, s);
          return s;
        })
        // A failed read judges on the last one, or admits: the enqueue answers 503 itself if Redis is gone.
        .catch((): Seen => this.seen.get(tenant) ?? { month, budget: null, mtd: { cost: 0, computeSeconds: 0 }, at: -Infinity })
        .finally(() => this.reading.delete(tenant));
      this.reading.set(tenant, r);
    }
    return r;
  }
}
