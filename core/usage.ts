// Pay-per-request metering. Whoever finishes a request (a replica, or the gateway cancelling a
// queued job) writes one usage record, and a request that ran twice (its replica went silent and
// another took it over) is counted once:
// - a live request (sync or async) is metered in the same Lua call that acknowledges its stream
//   entry, and only by the call whose XACK removed it from the pending list (core/live-queue.ts);
// - a batch line, or a queued job the gateway cancels, under its id, kept only if no record with
//   that id was written in the last day (a seen key each: these are bounded by batch sizes).
// Records are kept in a capped stream and rolled up per tenant × hour × function, per tenant ×
// month × function × version (invoices, and the month-to-date totals budgets judge:
// core/invoice.ts, core/budgets.ts), and per function × minute (core/series.ts), in the same
// call, in Redis (append-only). Each record carries the prices applied and its cost, decided by
// its writer (core/pricing.ts); the roll-ups sum cost as charged.
import type { Redis } from 'ioredis';
import { evalScript } from './redis.ts';
import { baseKey, plainName } from './names.ts';
import { lua } from './lua.ts';
import { usageKeys } from './keys.ts';
import { utcDigits } from './months.ts';
import { roundCost, type Pricing } from './pricing.ts';
import { latencyBucket, minuteKey, SERIES_TTL_S } from './series.ts';

export interface UsageRecord {
  /** The queue job's id: one record per accepted request. */
  id: string;
  tenant: string;
  key: string;
  fn: string;
  version: string;
  kind: 'sync' | 'async' | 'batch';
  /** The HTTP status the request was answered with (or would have been). */
  status: number;
  queueMs: number;
  /** Handler wall time. */
  computeMs: number;
  /** This request's share of each inference batch it rode in. */
  inferMs: number;
  /** How long it waited for a replica to start (0: none). */
  coldMs: number;
  bytesIn: number;
  bytesOut: number;
  at: string;
  /** A call from another function's handler: the calling request's id. */
  parent?: string;
  /** Time the handler waited on its own calls to other functions (ms). */
  callMs?: number;
  /** A sync caller went away before its answer: the handler was told to stop (ctx.signal), and the status is 499. */
  disconnected?: true;
  /** The prices in force where the record was written: the version's `pricing`, else the platform's EMBERS_PRICE_* defaults. */
  price: Pricing;
  /** What the request was charged: chargeOf(price, computeMs) (core/pricing.ts). */
  cost: number;
}

/** How long a batch line's id is remembered against double counting; retries happen within minutes. */
const SEEN_S = 24 * 3600;
/**
 * The raw record stream holds only records the leading scheduler has not exported to S3 yet
 * (scheduler/usage-exporter.ts). Its cap is a last resort that drops the oldest unexported ones:
 * about 2 GB, nearly 3 hours of an exporter down at 1,000 requests a second, after Redis's memory
 * budget (the gateway's redis_full admission) would normally have acted.
 */
export const RECORDS_MAX = 10_000_000;

/** Fields per record in the ARGV layout of core/lua/usage.lua. */
export const RECORD_FIELDS = 13;

/** A record's ARGV fields for core/lua/usage.lua; numbers Redis cannot add (NaN, Infinity) become 0, or they would fail the whole call. */
export function recordArgs(r: UsageRecord): string[] {
  const n = (x: number) => String(Number.isFinite(x) ? x : 0);
  return [JSON.stringify(r), r.fn, n(r.computeMs), n(r.inferMs), n(r.queueMs), n(r.coldMs), n(r.status), n(r.bytesIn), n(r.bytesOut), r.tenant, String(latencyBucket(r.queueMs + r.computeMs)), n(r.cost), monthField(r)];
}

/** The month roll-up's field prefix of a record: its function (a split version's key counts toward it) and version. */
export const monthField = (r: Pick<UsageRecord, 'fn' | 'version'>) => `${baseKey(r.fn)}|${r.version}|`;

/** The month roll-up key a record is added to. */
export const monthKey = (r: Pick<UsageRecord, 'tenant' | 'at'>) => usageKeys.month(r.tenant, utcDigits(r.at, 7));

/** The hourly roll-up key a record is added to. */
export const hourKey = (r: UsageRecord) => usageKeys.hour(r.tenant, utcDigits(r.at, 13));


const RECORD_MANY = lua('usage-record-many', { RECORD_FIELDS, SERIES_TTL_S });

export const hourOf = (d: Date) => utcDigits(d.getTime(), 13);

interface Waiting {
  r: UsageRecord;
  resolve: (counted: boolean) => void;
  reject: (err: Error) => void;
}

/** Records waiting for the end of the tick, per Redis client. */
const ticks = new WeakMap<Redis, Waiting[]>();

/**
 * Writes the record unless one with its id exists; true when this call counted it. Records
 * given in the same tick on the same client go to Redis in one call.
 */
export function recordUsage(redis: Redis, r: UsageRecord): Promise<boolean> {
  return new Promise((resolve, reject) => {
    let waiting = ticks.get(redis);
    if (!waiting) {
      ticks.set(redis, (waiting = []));
      setImmediate(() => {
        ticks.delete(redis);
        void flush(redis, waiting!);
      });
    }
    waiting.push({ r, resolve, reject });
  });
}

async function flush(redis: Redis, batch: Waiting[]): Promise<void> {
  const keys = [usageKeys.records, usageKeys.tenants];
  const args: string[] = [String(SEEN_S), String(RECORDS_MAX)];
  for (const { r } of batch) {
    keys.push(usageKeys.seen(r.id), hourKey(r), minuteKey(r.fn, r.at));
    args.push(...recordArgs(r));
  }
  for (const { r } of batch) keys.push(monthKey(r));
  try {
    const counted = (await evalScript(redis, RECORD_MANY, keys.length, ...keys, ...args)) as number[];
    batch.forEach((w, i) => w.resolve(counted[i] === 1));
  } catch (err) {
    for (const w of batch) w.reject(err as Error);
  }
}

export interface UsageRow {
  tenant: string;
  /** The name the tenant knows it by (records carry its key: core/names.ts). */
  function: string;
  /** Start of the hour or day (ISO). */
  period: string;
  requests: number;
  errors: number;
  coldStarts: number;
  computeSeconds: number;
  inferSeconds: number;
  queueSeconds: number;
  bytesIn: number;
  bytesOut: number;
  cost: number;
}

const MAX_HOURS = 24 * 93;

/**
 * Usage per tenant × function × hour or day between from (inclusive) and to (exclusive), its cost
 * as charged (summed from the records). `fn` is a plain name (each tenant's own function by it).
 */
export async function usageReport(redis: Redis, q: { tenants: string[]; from: Date; to: Date; fn?: string; granularity: 'hour' | 'day' }): Promise<UsageRow[]> {
  const hours: Date[] = [];
  for (let t = Math.floor(q.from.getTime() / 3_600_000) * 3_600_000; t < q.to.getTime() && hours.length < MAX_HOURS; t += 3_600_000) hours.push(new Date(t));
  const pipe = redis.pipeline();
  for (const tenant of q.tenants) for (const h of hours) pipe.hgetall(usageKeys.hour(tenant, hourOf(h)));
  const res = (await pipe.exec()) ?? [];
  const rows = new Map<string, UsageRow>();
  let i = 0;
  for (const tenant of q.tenants) {
    for (const h of hours) {
      const fields = res[i++][1] as Record<string, string>;
      const period = q.granularity === 'day' ? `${h.toISOString().slice(0, 10)}T00:00:00.000Z` : h.toISOString();
      for (const [field, value] of Object.entries(fields)) {
        const [key, metric] = field.split('|');
        // A version's own key (a traffic split) counts toward its function.
        const fn = baseKey(key);
        if (q.fn && plainName(fn) !== q.fn) continue;
        const id = `${tenant}|${fn}|${period}`;
        let row = rows.get(id);
        if (!row) {
          row = { tenant, function: fn, period, requests: 0, errors: 0, coldStarts: 0, computeSeconds: 0, inferSeconds: 0, queueSeconds: 0, bytesIn: 0, bytesOut: 0, cost: 0 };
          rows.set(id, row);
        }
        const n = Number(value);
        if (metric === 'requests') row.requests += n;
        else if (metric === 'errors') row.errors += n;
        else if (metric === 'cold_starts') row.coldStarts += n;
        else if (metric === 'compute_ms') row.computeSeconds += n / 1000;
        else if (metric === 'infer_ms') row.inferSeconds += n / 1000;
        else if (metric === 'queue_ms') row.queueSeconds += n / 1000;
        else if (metric === 'bytes_in') row.bytesIn += n;
        else if (metric === 'bytes_out') row.bytesOut += n;
        else if (metric === 'cost') row.cost += n;
      }
    }
  }
  const out = [...rows.values()];
  for (const r of out) {
    r.cost = roundCost(r.cost);
    r.function = plainName(r.function);
  }
  return out.sort((a, b) => a.period.localeCompare(b.period) || a.tenant.localeCompare(b.tenant) || a.function.localeCompare(b.function));
}
