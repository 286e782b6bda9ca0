// Pay-per-request metering. Whoever finishes a request (a replica, or the gateway cancelling a
// queued job) writes one usage record, keyed by the queue job's id: a retried job (its replica
// died) finishes under the same id, so it is counted once. Records are kept in a stream and
// rolled up per tenant × hour × function in the same Lua call, in Redis (append-only).
import type { Redis } from 'ioredis';
import { evalScript } from './redis.ts';

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
}

export const usageKeys = {
  seen: (id: string) => `embers:usage:seen:${id}`,
  records: 'embers:usage:records',
  /** fn|metric → value, per tenant and UTC hour (YYYYMMDDHH). */
  hour: (tenant: string, hour: string) => `embers:usage:${tenant}:${hour}`,
  tenants: 'embers:usage:tenants',
};

/** How long a request id is remembered against double counting; retries happen within minutes. */
const SEEN_S = 7 * 24 * 3600;
/** The raw record stream is capped (approximately); the hourly roll-ups are kept. */
const RECORDS_MAX = 1_000_000;

const RECORD = `
if not redis.call('SET', KEYS[1], '1', 'NX', 'EX', ARGV[1]) then return 0 end
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[2], '*', 'r', ARGV[3])
local f = ARGV[4] .. '|'
redis.call('HINCRBY', KEYS[3], f .. 'requests', 1)
redis.call('HINCRBYFLOAT', KEYS[3], f .. 'compute_ms', ARGV[5])
redis.call('HINCRBYFLOAT', KEYS[3], f .. 'infer_ms', ARGV[6])
redis.call('HINCRBYFLOAT', KEYS[3], f .. 'queue_ms', ARGV[7])
if tonumber(ARGV[8]) > 0 then redis.call('HINCRBY', KEYS[3], f .. 'cold_starts', 1) end
if tonumber(ARGV[9]) >= 400 then redis.call('HINCRBY', KEYS[3], f .. 'errors', 1) end
redis.call('HINCRBY', KEYS[3], f .. 'bytes_in', ARGV[10])
redis.call('HINCRBY', KEYS[3], f .. 'bytes_out', ARGV[11])
redis.call('SADD', KEYS[4], ARGV[12])
return 1`;

export const hourOf = (d: Date) => d.toISOString().slice(0, 13).replace(/[-T]/g, '');

/** Writes the record unless one with its id exists; true when this call counted it. */
export async function recordUsage(redis: Redis, r: UsageRecord): Promise<boolean> {
  const hour = hourOf(new Date(r.at));
  const done = (await evalScript(redis, 
    RECORD,
    4,
    usageKeys.seen(r.id),
    usageKeys.records,
    usageKeys.hour(r.tenant, hour),
    usageKeys.tenants,
    String(SEEN_S),
    String(RECORDS_MAX),
    JSON.stringify(r),
    r.fn,
    String(r.computeMs),
    String(r.inferMs),
    String(r.queueMs),
    String(r.coldMs),
    String(r.status),
    String(r.bytesIn),
    String(r.bytesOut),
    r.tenant,
  )) as number;
  return done === 1;
}

export interface UsageRow {
  tenant: string;
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

export interface Pricing {
  perRequest: number;
  perComputeSecond: number;
}

const MAX_HOURS = 24 * 93;

/** Usage per tenant × function × hour or day between from (inclusive) and to (exclusive). */
export async function usageReport(
  redis: Redis,
  q: { tenants: string[]; from: Date; to: Date; fn?: string; granularity: 'hour' | 'day'; pricing: (fn: string) => Pricing },
): Promise<UsageRow[]> {
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
        const [fn, metric] = field.split('|');
        if (q.fn && fn !== q.fn) continue;
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
      }
    }
  }
  const out = [...rows.values()].sort((a, b) => a.period.localeCompare(b.period) || a.tenant.localeCompare(b.tenant) || a.function.localeCompare(b.function));
  for (const r of out) {
    const p = q.pricing(r.function);
    r.cost = Math.round((r.requests * p.perRequest + r.computeSeconds * p.perComputeSecond) * 1e6) / 1e6;
  }
  return out;
}
