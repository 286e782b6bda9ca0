// Async job records: created by the gateway, moved to running and to their outcome by the
// replica, read and cancelled through /v1/jobs. Every transition is one Lua script, so a
// replica that crashed and a job that was retried can never overwrite a finished outcome.
import { createHmac, randomBytes } from 'node:crypto';
import type { Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import { encodeReply, type ReplyHeader, type RunJobData } from './contracts.ts';
import { evalScript } from './redis.ts';
import { plainName } from './names.ts';
import { lua } from './lua.ts';
import { keys } from './keys.ts';
import { SPILL_MIN_BYTES, writeSpill } from './live-entry.ts';

export type JobStatus = 'queued' | 'running' | 'succeeded' | 'failed' | 'canceled';
const TERMINAL: JobStatus[] = ['succeeded', 'failed', 'canceled'];
export const isTerminal = (s: string) => (TERMINAL as string[]).includes(s);

/** A queued job's record lives this long (it waits that long at most); finished ones, the retention. */
export const QUEUED_TTL_S = 7 * 24 * 3600;
/** An expired job still answers "expired" (not "unknown") this long after its result is gone. */
const TOMBSTONE_S = 30 * 24 * 3600;

export interface JobView {
  id: string;
  /** The name its tenant knows the function by (the record keeps its key: core/names.ts). */
  function: string;
  version?: string;
  status: JobStatus;
  createdAt: string;
  startedAt?: string;
  finishedAt?: string;
  /** The HTTP status a synchronous run would have answered. */
  httpStatus?: number;
  /** As a run's reply header carries it (ReplyHeader). */
  timing?: ReplyHeader['timing'];
  output?: unknown;
  /**
   * The handler answered with bytes (binary()) of this Content-Type: `output` is
   * `{ contentType, base64 }`, and GET /v1/jobs/:id/output answers with the bytes themselves.
   */
  outputType?: string;
  error?: { code: string; message: string };
  cancelRequested?: boolean;
  webhook?: string;
  url: string;
}

export interface JobOutcome {
  httpStatus: number;
  /** The result JSON, or an error body `{ error: { code, message } }`. */
  body: string;
  /** The result is bytes of this Content-Type, and `body` their `{ contentType, base64 }`. */
  type?: string;
  canceled: boolean;
  timing: JobView['timing'];
  version: string;
}

const START = lua('job-start');
const FINISH = lua('job-finish');

/** The ids JobStore.newId makes (12 random bytes, base64url): routes check an id by it before any lookup. */
export const JOB_ID = /^job_[A-Za-z0-9_-]{16}$/;

/** The job fields a listing reads: all but the result. */
const LISTED = ['id', 'function', 'tenant', 'status', 'createdAt', 'version', 'startedAt', 'finishedAt', 'webhook', 'cancel', 'timing', 'httpStatus', 'type'];

/** How many of a tenant's jobs GET /v1/jobs can list. */
const RECENT_JOBS = 1000;

export class JobStore {
  constructor(
    private readonly redis: Redis,
    /** How long a finished job's result is kept (s). */
    readonly retentionS: number,
  ) {}

  static newId(): string {
    return `job_${randomBytes(12).toString('base64url')}`;
  }

  async create(r: { id: string; fn: string; tenant: string; key: string; webhook?: string }): Promise<void> {
    const fields: Record<string, string> = { id: r.id, function: r.fn, tenant: r.tenant, key: r.key, status: 'queued', createdAt: new Date().toISOString() };
    if (r.webhook) fields.webhook = r.webhook;
    await this.redis
      .multi()
      .hset(keys.job(r.id), fields)
      .expire(keys.job(r.id), QUEUED_TTL_S)
      .zadd(keys.recentJobs(r.tenant), Date.now(), r.id)
      .zremrangebyrank(keys.recentJobs(r.tenant), 0, -RECENT_JOBS - 1)
      .exec();
  }

  /** A tenant's newest jobs whose records are kept, newest first, without outputs or errors (GET /v1/jobs/:id has them). */
  async list(tenant: string, limit: number, baseUrl: string): Promise<JobView[]> {
    const ids = await this.redis.zrevrange(keys.recentJobs(tenant), 0, limit - 1);
    if (!ids.length) return [];
    const pipe = this.redis.pipeline();
    for (const id of ids) pipe.hmget(keys.job(id), ...LISTED);
    const rows = ((await pipe.exec()) ?? []).map(([, values]) => Object.fromEntries(LISTED.map((f, i) => [f, (values as (string | null)[])[i]]).filter(([, v]) => v !== null)) as Record<string, string>);
    return rows.filter((h) => h.status && h.tenant === tenant).map((h) => toView(h, baseUrl));
  }

  /** The replica is about to run it: 'running', or why not ('cancel', 'gone' or a final status). */
  async start(id: string, replica: string): Promise<string> {
    return (await evalScript(this.redis, START, 1, keys.job(id), new Date().toISOString(), replica)) as string;
  }

  /**
   * Records the outcome once. Returns the webhook to notify when this call finished the job,
   * null when it had already finished (a retry) or has no webhook. `ifQueued` finishes only a job
   * no replica has started (a cancel of a queued job).
   */
  async finish(id: string, o: JobOutcome, ifQueued = false): Promise<{ finished: boolean; webhook?: string }> {
    const status: JobStatus = o.canceled ? 'canceled' : o.httpStatus < 400 ? 'succeeded' : 'failed';
    // A large result is written beside the call, on the same connection just before it (FINISH).
    const spill = o.body.length >= SPILL_MIN_BYTES ? writeSpill(this.redis, o.body, this.retentionS * 1000) : '';
    const finishing = evalScript(
      this.redis,
      FINISH,
      3,
      keys.job(id),
      keys.jobGone(id),
      keys.jobResult(id),
      status,
      new Date().toISOString(),
      String(o.httpStatus),
      spill ? '' : o.body,
      JSON.stringify(o.timing ?? null),
      o.version,
      String(this.retentionS),
      String(this.retentionS + TOMBSTONE_S),
      ifQueued ? '1' : '0',
      o.type ?? '',
      spill,
    );
    // A call that failed leaves no copy behind (one that ran has renamed or removed it).
    if (spill) finishing.catch(() => this.redis.unlink(spill).catch(() => 0));
    const done = (await finishing) as number;
    if (!done) return { finished: false };
    const webhook = await this.redis.hget(keys.job(id), 'webhook');
    return { finished: true, webhook: webhook ?? undefined };
  }

  /** Marks a running job for cancellation; false when it has already finished. */
  async requestCancel(id: string): Promise<boolean> {
    const status = await this.redis.hget(keys.job(id), 'status');
    if (!status || isTerminal(status)) return false;
    await this.redis.hset(keys.job(id), 'cancel', '1');
    return true;
  }

  /** The job (`fn`: its function's key), 'expired' when its result is gone, or null when it never existed. */
  async get(id: string, baseUrl: string): Promise<{ view: JobView; tenant: string; key: string; fn: string } | { expired: true; tenant: string } | null> {
    const [[, h], [, gone], [, spilled]] = (await this.redis.multi().hgetall(keys.job(id)).get(keys.jobGone(id)).get(keys.jobResult(id)).exec()) as [[null, Record<string, string>], [null, string | null], [null, string | null]];
    if (!h.status) return gone !== null ? { expired: true, tenant: gone } : null;
    if (h.resultSpilled === '1') {
      if (spilled === null) return { expired: true, tenant: h.tenant ?? '' };
      h.result = spilled;
    }
    return { view: toView(h, baseUrl), tenant: h.tenant ?? '', key: h.key ?? '', fn: h.function };
  }
}

function toView(h: Record<string, string>, baseUrl: string): JobView {
  const v: JobView = { id: h.id, function: plainName(h.function), status: h.status as JobStatus, createdAt: h.createdAt, url: `${baseUrl}/v1/jobs/${h.id}` };
  if (h.version) v.version = h.version;
  if (h.startedAt) v.startedAt = h.startedAt;
  if (h.finishedAt) v.finishedAt = h.finishedAt;
  if (h.webhook) v.webhook = h.webhook;
  if (h.cancel === '1' && !isTerminal(h.status)) v.cancelRequested = true;
  if (h.timing && h.timing !== 'null') v.timing = JSON.parse(h.timing) as JobView['timing'];
  if (h.httpStatus) v.httpStatus = Number(h.httpStatus);
  if (h.result !== undefined) {
    const parsed = JSON.parse(h.result) as unknown;
    if (h.status !== 'succeeded') v.error = (parsed as { error?: JobView['error'] })?.error;
    else {
      v.output = parsed;
      if (h.type) v.outputType = h.type;
    }
  }
  return v;
}

/**
 * Answers a live request that will not run, or will not finish, for want of its function (deleted):
 * an async job ends with `status` (with `onlyIfQueued`, only if no replica has started it) and its
 * webhook is queued; a waiting caller gets the reply on its gateway's channel. `by` names who
 * answered (the reply's `replica`). Used by the gateway's forced delete and by a node agent whose
 * replica of a deleted function stopped while holding requests.
 */
export async function answerUnrun(o: { redis: Redis; jobs: JobStore; webhooks: Queue; by: string }, data: RunJobData, status: number, body: string, onlyIfQueued: boolean): Promise<void> {
  const timing = { queueMs: 0, handlerMs: 0, inferMs: 0, batchMs: 0, execMs: 0, inputMs: 0, outputMs: 0 };
  if (data.job) {
    const done = await o.jobs.finish(data.job, { httpStatus: status, body, canceled: false, timing, version: '' }, onlyIfQueued);
    if (done.finished && done.webhook) await enqueueWebhook(o.webhooks, { job: data.job, url: done.webhook });
  } else if (data.gw) {
    await o.redis.publish(keys.replyChannel(data.gw), encodeReply({ rid: data.rid, ...(data.id ? { id: data.id } : {}), status, replica: o.by, timing }, body));
  }
}

/** The error body of a job stopped through DELETE /v1/jobs/:id. */
export const CANCELED_BODY = JSON.stringify({ error: { code: 'canceled', message: 'canceled by DELETE /v1/jobs/:id' } });

// ---- webhooks -------------------------------------------------------------------------------

/** A finished async job's webhook: its record is read and sent at delivery. */
export interface JobWebhook {
  job: string;
  url: string;
}

/** A tenant's platform event (a budget alert): its body made when it was queued. */
export interface EventWebhook {
  /** The delivery's id (Embers-Webhook-Id), unique per event. */
  id: string;
  event: string;
  tenant: string;
  url: string;
  body: string;
}

export type WebhookDelivery = JobWebhook | EventWebhook;

export const WEBHOOK_ATTEMPTS = 6;

const DELIVERY = {
  attempts: WEBHOOK_ATTEMPTS,
  backoff: { type: 'exponential', delay: 1_000 },
  removeOnComplete: { age: 24 * 3600 },
  removeOnFail: { age: 7 * 24 * 3600 },
} as const;

/** At-least-once: BullMQ retries with exponential backoff; the job id dedupes repeated enqueues. */
export async function enqueueWebhook(queue: Queue, d: JobWebhook): Promise<void> {
  await queue.add('deliver', d, { ...DELIVERY, jobId: d.job });
}

/** An event's webhook, delivered and retried as a job's; its id dedupes repeated enqueues. */
export async function enqueueEventWebhook(queue: Queue, e: EventWebhook): Promise<void> {
  await queue.add('event', e, { ...DELIVERY, jobId: e.id });
}

/**
 * Each tenant signs with its own secret, derived from the platform's, so one tenant can never
 * forge deliveries to another's receiver. `GET /v1/webhooks/secret` hands it to the tenant.
 */
export function tenantWebhookSecret(root: string, tenant: string): string {
  return `whsec_${createHmac('sha256', root).update(`webhook:${tenant}`).digest('base64url')}`;
}

/** `t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">`, as Stripe signs. */
export function signWebhook(secret: string, body: string, t = Math.floor(Date.now() / 1000)): string {
  return `t=${t},v1=${createHmac('sha256', secret).update(`${t}.${body}`).digest('hex')}`;
}
