// What /metrics reports of the platform's state, from what scrape.ts reads in Redis: replicas by
// state, live requests waiting, batch work outstanding, usage records not yet exported. Pure: Redis's replies in, values out.

const REPLICA_STATES = ['starting', 'ready', 'draining', 'failed'] as const;

/** A batch's fields scrape.ts reads, in this order (HMGET). */
export const BATCH_FIELDS = ['function', 'status', 'total', 'completed', 'failed', 'progressAt', 'inProgressAt', 'paused'] as const;

export interface ClusterGauges {
  replicas: Map<string, Record<string, number>>;
  waiting: Map<string, { requests: number; oldestSeconds: number }>;
  batches: Map<string, { outstanding: number; secondsSinceProgress: number }>;
  /** Usage records in Redis (the stream keeps only those not exported to S3), and the age of the oldest. */
  usage: { bufferRecords: number; lagSeconds: number };
}

export interface ClusterReading {
  /** Deployed functions (their keys). */
  functions: string[];
  /** Redis's clock, ms since the epoch. */
  nowMs: number;
  /** core/lua/live-waiting.lua's reply for `functions`: waiting count and oldest entry id, per function. */
  waiting: unknown[];
  /** The replicas' heartbeat records, per function. */
  replicas: { state?: string }[][];
  /** BATCH_FIELDS of each active batch. */
  batches: (string | null)[][];
  /** The usage record stream's length and its first entry's id (null: empty). */
  usage: { records: number; oldestId: string | null };
}

/** Every deployed function gets a value for each gauge (0 when idle), so alerts and panels always have a series. */
export function clusterGauges(r: ClusterReading): ClusterGauges {
  // A stream id starts with the ms Redis added it at: the oldest record not exported waited since.
  const oldestMs = Number(r.usage.oldestId?.split('-')[0]) || 0;
  const usage = { bufferRecords: r.usage.records, lagSeconds: oldestMs > 0 ? Math.max(0, r.nowMs - oldestMs) / 1000 : 0 };
  const out: ClusterGauges = { replicas: new Map(), waiting: new Map(), batches: new Map(), usage };
  r.functions.forEach((fn, i) => {
    const counts: Record<string, number> = Object.fromEntries(REPLICA_STATES.map((s) => [s, 0]));
    for (const rec of r.replicas[i] ?? []) if (rec.state) counts[rec.state] = (counts[rec.state] ?? 0) + 1;
    out.replicas.set(fn, counts);
    const requests = Number(r.waiting[2 * i]) || 0;
    const queuedAt = Number(String(r.waiting[2 * i + 1] ?? '0').split('-')[0]) || 0;
    out.waiting.set(fn, { requests, oldestSeconds: requests > 0 && queuedAt > 0 ? Math.max(0, r.nowMs - queuedAt) / 1000 : 0 });
    out.batches.set(fn, { outstanding: 0, secondsSinceProgress: 0 });
  });
  for (const row of r.batches) {
    const [fn, status, total, completed, failed, progressAt, inProgressAt, paused] = row;
    if (!fn || status !== 'in_progress') continue;
    const outstanding = Math.max(0, Number(total) - Number(completed) - Number(failed));
    if (!(outstanding > 0)) continue;
    // Before its first line finishes, a batch has been waiting for progress since it started.
    const since = Number(progressAt) || Date.parse(inProgressAt ?? '') || r.nowMs;
    const b = out.batches.get(fn) ?? { outstanding: 0, secondsSinceProgress: 0 };
    b.outstanding += outstanding;
    // One paused for its tenant's budget waits by design: it is not stalled.
    if (!paused) b.secondsSinceProgress = Math.max(b.secondsSinceProgress, Math.max(0, r.nowMs - since) / 1000);
    out.batches.set(fn, b);
  }
  return out;
}
