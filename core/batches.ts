// Bulk batch records (anchor: the OpenAI Batch API). The gateway creates them, the feeder (in
// the leading scheduler) validates, feeds and finalizes them, and replicas record each line's
// outcome exactly once. State lives in Redis (append-only) and files in S3, so any part of the
// platform can restart mid-batch.
import { randomBytes } from 'node:crypto';
import type { Redis } from 'ioredis';
import { type BatchChunkData, type BatchChunkLine, type RunJobData } from './contracts.ts';
import { evalScript } from './redis.ts';
import { plainName } from './names.ts';
import { lua } from './lua.ts';
import { keys } from './keys.ts';

export type BatchStatus = 'validating' | 'in_progress' | 'finalizing' | 'completed' | 'failed' | 'cancelling' | 'cancelled';
export const BATCH_TERMINAL: BatchStatus[] = ['completed', 'failed', 'cancelled'];

export interface BatchView {
  id: string;
  object: 'batch';
  /** The name its tenant knows the function by (the record keeps its key: core/names.ts). */
  function: string;
  status: BatchStatus;
  inputUri: string;
  outputUri?: string;
  errorsUri?: string;
  request_counts: { total: number; completed: number; failed: number };
  createdAt: string;
  inProgressAt?: string;
  finalizingAt?: string;
  completedAt?: string;
  failedAt?: string;
  cancellingAt?: string;
  cancelledAt?: string;
  /** Why the batch failed as a whole (bad lines only ever fail their own line). */
  error?: string;
  /** While in progress: why no more lines are queued for now (the lines already queued still run). */
  paused?: BatchPause;
  urls: { self: string; output: string; errors: string };
}

/** Why a batch in progress queues no more lines for now; it resumes by itself once that ends. */
export interface BatchPause {
  code: 'budget_exhausted';
  message: string;
  since: string;
}

/** The raw hash, for the feeder. */
export interface BatchRecord {
  id: string;
  function: string;
  tenant: string;
  /** The API key that created it: its lines are metered to it. */
  key: string;
  status: BatchStatus;
  inputUri: string;
  total: number;
  completed: number;
  failed: number;
  /** Lines that failed validation (they never reach the queue). */
  invalid: number;
  /** How far the feeder has read the input (line number), and how many valid lines it queued. */
  cursor: number;
  fed: number;
  /**
   * Lines from `chunkFrom` on are queued `chunkSize` to a job (see chunkOf); while unset (0) or
   * 1, one line a job. Both change only with the cursor, chunkFrom just after it, so a feeder
   * that resumes from the cursor after a restart cuts the same chunks, and BullMQ's job ids keep
   * the jobs queued before the restart from being queued twice.
   */
  chunkSize: number;
  chunkFrom: number;
  createdAt: string;
  /** When a line last finished (ms since the epoch, Redis's clock: batch-item-done.lua); unset until one has. */
  progressAt?: string;
  /** A BatchPause as JSON, while the feeder holds the batch's lines back. */
  paused?: string;
}

/** A batch line's job id, and the id it is metered and logged under. */
const batchJobId = (batch: string, line: number) => `${batch}.${line}`;

/** The id of the job that holds the chunk of lines starting at `first`. */
const batchChunkId = (batch: string, first: number) => `${batch}.c${first}`;

/** Options of every batch-queue job: removed once done, a failed one kept a while, never retried by BullMQ (the replica handles crashes). */
const BATCH_JOB_OPTS = { removeOnComplete: true, removeOnFail: { count: 100 }, attempts: 1 } as const;

/** A batch-queue job for one line alone (the feeder's, and a replica's when it splits a chunk whose replica died). */
export function lineJob(batch: string, l: BatchChunkLine, meta: { enq: number; t?: string; k?: string }) {
  const id = batchJobId(batch, l.line);
  const data: RunJobData = { rid: id, batch: { id: batch, line: l.line, cid: l.cid }, input: l.input, bin: l.bin, ...meta };
  return { name: 'batch', data, opts: { jobId: id, ...BATCH_JOB_OPTS } };
}

/** A batch-queue job for the lines of one chunk, the first of them `first`. */
export function chunkJob(batch: string, first: number, lines: BatchChunkLine[], meta: { enq: number; t?: string; k?: string }) {
  const data: BatchChunkData = { chunk: { batch, lines }, ...meta };
  return { name: 'batch', data, opts: { jobId: batchChunkId(batch, first), ...BATCH_JOB_OPTS } };
}

/** A chunk's lines (all, or those given) as the jobs each would be alone. */
export function chunkLineJobs({ chunk, ...meta }: BatchChunkData, lines = chunk.lines) {
  return lines.map((l) => lineJob(chunk.batch, l, meta));
}

/** The first line of the chunk `line` falls in, or undefined when it is queued alone. */
export function chunkOf(line: number, r: Pick<BatchRecord, 'chunkSize' | 'chunkFrom'>): number | undefined {
  if (r.chunkSize <= 1 || line < r.chunkFrom) return undefined;
  return r.chunkFrom + Math.floor((line - r.chunkFrom) / r.chunkSize) * r.chunkSize;
}

const ITEM_DONE = lua('batch-item-done');

const TRANSITION = lua('batch-transition');

/** The ids BatchStore.newId makes (12 random bytes, base64url): routes check an id by it before any lookup. */
export const BATCH_ID = /^batch_[A-Za-z0-9_-]{16}$/;

export class BatchStore {
  constructor(private readonly redis: Redis) {}

  static newId(): string {
    return `batch_${randomBytes(12).toString('base64url')}`;
  }

  async create(r: { id: string; fn: string; tenant: string; key: string; inputUri: string }): Promise<void> {
    const now = Date.now();
    await this.redis
      .multi()
      .hset(keys.batch(r.id), {
        id: r.id,
        function: r.fn,
        tenant: r.tenant,
        key: r.key,
        status: 'validating',
        inputUri: r.inputUri,
        total: 0,
        completed: 0,
        failed: 0,
        invalid: 0,
        cursor: 0,
        fed: 0,
        createdAt: new Date(now).toISOString(),
      })
      .sadd(keys.activeBatches, r.id)
      .zadd(keys.batches, now, r.id)
      .exec();
  }

  async record(id: string): Promise<BatchRecord | null> {
    const h = await this.redis.hgetall(keys.batch(id));
    if (!h.status) return null;
    return {
      ...(h as unknown as BatchRecord),
      total: Number(h.total),
      completed: Number(h.completed),
      failed: Number(h.failed),
      invalid: Number(h.invalid),
      cursor: Number(h.cursor),
      fed: Number(h.fed),
      chunkSize: Number(h.chunkSize ?? 0),
      chunkFrom: Number(h.chunkFrom ?? 0),
    };
  }

  async view(id: string, baseUrl: string): Promise<{ view: BatchView; tenant: string } | null> {
    const h = await this.redis.hgetall(keys.batch(id));
    if (!h.status) return null;
    return { view: toView(h, baseUrl), tenant: h.tenant ?? '' };
  }

  /** Newest first. */
  async list(baseUrl: string, limit = 20): Promise<{ view: BatchView; tenant: string }[]> {
    const ids = await this.redis.zrevrange(keys.batches, 0, limit - 1);
    const found = await Promise.all(ids.map((id) => this.view(id, baseUrl)));
    return found.filter((b) => b !== null);
  }

  /**
   * A line's outcome: `ok` lines go to the output file, the rest to the errors file. Returns 1
   * when recorded, 0 when the line already had one (a retried job), -1 when the batch is over.
   */
  async lineDone(id: string, line: number, ok: boolean, json: string, invalid = false): Promise<number> {
    return (await evalScript(this.redis, ITEM_DONE, 2, keys.batch(id), keys.batchResults(id), String(line), `${ok ? 'o' : 'e'}${json}`, ok ? 'completed' : 'failed', invalid ? '1' : '0')) as number;
  }

  /** 'ok' when moved; otherwise the status it was in (or null when there is no such batch). */
  async transition(id: string, from: BatchStatus[], fields: Partial<Record<keyof BatchRecord | keyof BatchView, string | number>>): Promise<string | null> {
    const args = Object.entries(fields).flatMap(([k, v]) => [k, String(v)]);
    return (await evalScript(this.redis, TRANSITION, 1, keys.batch(id), from.join(','), ...args)) as string | null;
  }

  async set(id: string, fields: Partial<Record<keyof BatchRecord | keyof BatchView, string | number>>): Promise<void> {
    await this.redis.hset(keys.batch(id), fields);
  }

  /**
   * Holds the batch's remaining lines back (shown in its view while it is in progress); null: lets
   * them go, its progress time restarting then (a pause is no stall: cluster-gauges.ts).
   */
  async pause(id: string, why: BatchPause | null): Promise<void> {
    if (why) await this.redis.hset(keys.batch(id), 'paused', JSON.stringify(why));
    else await this.redis.multi().hdel(keys.batch(id), 'paused').hset(keys.batch(id), 'progressAt', String(Date.now())).exec();
  }

  /** Line numbers that already have an outcome (invalid lines, and done ones after a restart). */
  async doneLines(id: string): Promise<Set<number>> {
    const out = new Set<number>();
    let cursor = '0';
    do {
      const [next, fields] = await this.redis.hscan(keys.batchResults(id), cursor, 'COUNT', 1000);
      cursor = next;
      for (let i = 0; i < fields.length; i += 2) out.add(Number(fields[i]));
    } while (cursor !== '0');
    return out;
  }

  /** Every recorded outcome, in line order, split into output and error JSONL. */
  async results(id: string): Promise<{ output: string; errors: string }> {
    const rows: [number, string][] = [];
    let cursor = '0';
    do {
      const [next, fields] = await this.redis.hscan(keys.batchResults(id), cursor, 'COUNT', 1000);
      cursor = next;
      for (let i = 0; i < fields.length; i += 2) rows.push([Number(fields[i]), fields[i + 1]]);
    } while (cursor !== '0');
    rows.sort((a, b) => a[0] - b[0]);
    const output: string[] = [];
    const errors: string[] = [];
    for (const [, v] of rows) (v[0] === 'o' ? output : errors).push(v.slice(1));
    const jsonl = (lines: string[]) => (lines.length ? `${lines.join('\n')}\n` : '');
    return { output: jsonl(output), errors: jsonl(errors) };
  }

  async status(id: string): Promise<BatchStatus | null> {
    return (await this.redis.hget(keys.batch(id), 'status')) as BatchStatus | null;
  }

  /** Which of these lines already have an outcome, in their order. */
  async haveResults(id: string, lines: number[]): Promise<boolean[]> {
    if (lines.length === 0) return [];
    return (await this.redis.hmget(keys.batchResults(id), ...lines.map(String))).map((v) => v !== null);
  }

  async retire(id: string): Promise<void> {
    await this.redis.multi().srem(keys.activeBatches, id).del(keys.batchResults(id)).del(keys.batchHeld(id)).exec();
  }

  active(): Promise<string[]> {
    return this.redis.smembers(keys.activeBatches);
  }

  /**
   * Lines queued and not yet done, by function, over the batches in progress: the load the
   * scaler counts for batch work (a chunk job holds many lines, run side by side).
   */
  async linesOut(): Promise<Map<string, number>> {
    const out = new Map<string, number>();
    const ids = await this.active();
    if (ids.length === 0) return out;
    const pipe = this.redis.pipeline();
    for (const id of ids) pipe.hmget(keys.batch(id), 'function', 'status', 'fed', 'completed', 'failed', 'invalid', 'paused');
    for (const [, v] of (await pipe.exec()) ?? []) {
      const [fn, status, fed, completed, failed, invalid, paused] = (v ?? []) as (string | null)[];
      // A paused batch's lines wait outside the queue (scheduler/batch-hold.ts): no load.
      if (!fn || status !== 'in_progress' || paused) continue;
      const n = Number(fed) - (Number(completed) + Number(failed) - Number(invalid));
      if (n > 0) out.set(fn, (out.get(fn) ?? 0) + n);
    }
    return out;
  }
}

function toView(h: Record<string, string>, baseUrl: string): BatchView {
  const self = `${baseUrl}/v1/batches/${h.id}`;
  const v: BatchView = {
    id: h.id,
    object: 'batch',
    function: plainName(h.function),
    status: h.status as BatchStatus,
    inputUri: h.inputUri,
    request_counts: { total: Number(h.total), completed: Number(h.completed), failed: Number(h.failed) },
    createdAt: h.createdAt,
    urls: { self, output: `${self}/output`, errors: `${self}/errors` },
  };
  for (const k of ['outputUri', 'errorsUri', 'inProgressAt', 'finalizingAt', 'completedAt', 'failedAt', 'cancellingAt', 'cancelledAt', 'error'] as const) if (h[k]) v[k] = h[k];
  if (h.paused && h.status === 'in_progress') v.paused = JSON.parse(h.paused) as BatchPause;
  return v;
}

/** One line of the output or errors file. */
export function outputLine(cid: string, body: string): string {
  return `{"custom_id":${JSON.stringify(cid)},"output":${body}}`;
}

export function errorLine(cid: string | null, line: number, error: { code: string; message: string; status?: number }): string {
  return JSON.stringify({ custom_id: cid, line, error });
}
