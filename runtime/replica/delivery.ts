// Where a request's outcome goes, and its usage record with it, in one place: a sync request's
// reply (to its gateway's channel), an async job's record, a batch line's output. A live
// request's reply and usage record are written when its stream entry is acknowledged, so a
// request is metered once, whatever retries happen.
import type { Redis } from 'ioredis';
import { Queue } from 'bullmq';
import { BatchStore, errorLine, outputLine } from '../../core/batches.ts';
import { sinceEnqueued } from '../../core/clock.ts';
import { destinationOf, encodeReply, type Destination, type Manifest, type ReplyHeader, type RunJobData } from '../../core/contracts.ts';
import { CANCELED_BODY, enqueueWebhook, isTerminal, JobStore } from '../../core/jobs.ts';
import { keys, QUEUE_PREFIX, WEBHOOK_QUEUE } from '../../core/keys.ts';
import type { LiveOutcome } from '../../core/live-queue.ts';
import type { Logger } from '../../core/log.ts';
import { chargeOf, pricesFor, type Pricing } from '../../core/pricing.ts';
import { recordUsage, type UsageRecord } from '../../core/usage.ts';
import { binaryAsJson, type BinaryBody } from '../user-code/result-body.ts';
import { unrunTiming } from '../channel/timing.ts';

/** A request's usage kind, by where its outcome goes. */
export const USAGE_KIND = { gateway: 'sync', job: 'async', batch: 'batch' } as const;

/** Text replies longer than this (UTF-16 units) are handed to Redis as bytes (deliver). */
const LARGE_REPLY = 64 * 1024;

/** How a request ended, besides its header and body. */
export interface Delivered {
  /** An async job stopped by its caller's cancel. */
  canceled?: boolean;
  /** The handler answered with bytes (the body is then unused). */
  bytes?: BinaryBody;
  /** A sync caller went away: nobody gets a reply, and the usage record says so. */
  disconnected?: boolean;
  /** A sync caller was sent the answer as chunks, as they came: their bytes. */
  streamedBytes?: number;
}

export interface DeliveryOptions {
  redis: Redis;
  manifest: Manifest;
  /** The replica that ran the requests, named in their replies. */
  replica: string;
  jobRetentionS: number;
  /** Prices of a version that sets no `pricing`. */
  platformPricing: Pricing;
  log: Logger;
}

export class Delivery {
  /** Outcomes sent, for the replica's record: failed ones are 5xx. */
  readonly counts = { completed: 0, failed: 0 };
  /** What the outcomes sent were metered, summed, for the agent's /metrics (a request run twice counts twice here, once in usage). */
  readonly metered = { requests: 0, computeMs: 0, bytesIn: 0, bytesOut: 0 };
  readonly jobStore: JobStore;
  readonly batchStore: BatchStore;
  private webhookQueue?: Queue;
  /** What this version's requests cost: fixed for the replica's life, as its manifest and environment are. */
  private readonly price: Pricing;

  constructor(private readonly o: DeliveryOptions) {
    this.jobStore = new JobStore(o.redis, o.jobRetentionS);
    this.batchStore = new BatchStore(o.redis);
    this.price = pricesFor(o.manifest.pricing, o.platformPricing);
  }

  /**
   * Sends the outcome where the job says. A sync request's reply and a live request's usage
   * record come back, to be written with its entry's acknowledgement (LiveConsumer); a busy
   * replica's replies go in that same call, a lone one's just before it. A batch line is metered
   * under its id, with the other records of the tick, and its output written. `bytes`: the handler
   * answered with bytes (`body` is then unused): a sync caller gets them as they are (the reply's
   * body is bytes, its header says their type), an async job and a batch line as JSON (binaryAsJson).
   */
  async deliver(jobId: string, data: RunJobData, header: ReplyHeader, body: string, o: Delivered = {}): Promise<LiveOutcome | undefined> {
    const { canceled = false, disconnected } = o;
    let { bytes } = o;
    if (header.status >= 500) this.counts.failed++;
    else this.counts.completed++;
    const destination = destinationOf(data);
    const toGateway = destination?.to === 'gateway';
    // Metered by what the caller gets: a sync caller the bytes, an async job and a batch line their JSON.
    if (bytes && !toGateway) body = binaryAsJson(bytes);
    const bytesOut = disconnected ? (o.streamedBytes ?? 0) : o.streamedBytes ?? (bytes && toGateway ? bytes.bytes.length : Buffer.byteLength(body));
    const usage = this.usageRecord(jobId, data, header, bytesOut, destination?.to ?? 'batch');
    if (disconnected) usage.disconnected = true;
    this.meter(usage);
    switch (destination?.to) {
      case 'gateway': {
        // Nobody waits for it.
        if (disconnected) return { usage };
        // With the version that ran it: while replicas roll to another, the old one may still answer.
        header = { ...header, ...(destination.id ? { id: destination.id } : {}), version: this.o.manifest.version };
        let message: string | Buffer = bytes ? encodeReply({ ...header, type: bytes.contentType, ...(bytes.headerLength !== undefined ? { headerLength: bytes.headerLength } : {}) }, bytes.bytes) : encodeReply(header, body);
        // A large text reply goes to ioredis as bytes, encoded once: as a string it would be
        // measured, copied into the command's text and encoded again.
        if (typeof message === 'string' && message.length > LARGE_REPLY) message = Buffer.from(message);
        return { usage, reply: { channel: keys.replyChannel(destination.gateway), message } };
      }
      case 'job': {
        const done = await this.jobStore.finish(destination.job, { httpStatus: header.status, body, type: bytes?.contentType, canceled, timing: header.timing, version: this.o.manifest.version });
        if (done.webhook) await enqueueWebhook(this.webhooks(), { job: destination.job, url: done.webhook });
        // Whoever follows its events (GET /v1/jobs/:id/events) hears that it ended.
        if (done.finished) void this.o.redis.publish(keys.chunksChannel(destination.job), 'end').catch(() => 0);
        return { usage };
      }
      case 'batch': {
        const metered = recordUsage(this.o.redis, usage).catch((err: Error) => this.o.log.error({ err: err.message, rid: data.rid }, 'could not record usage'));
        try {
          const { id, line, cid } = destination.line;
          // The body comes from the user code: an output line holds it only if it is JSON.
          const parsed = jsonOrUndefined(body);
          const ok = header.status < 400 && parsed !== undefined;
          const said = (parsed as { error?: { code?: unknown; message?: unknown } } | null | undefined)?.error;
          const error = ok
            ? undefined
            : header.status < 400
              ? { code: 'invalid_answer', message: 'the handler answered with something that is not JSON', status: 500 }
              : { ...(typeof said === 'object' && said !== null ? said : {}), code: typeof said?.code === 'string' ? said.code : 'error', message: typeof said?.message === 'string' ? said.message : body.slice(0, 2000), status: header.status };
          await this.batchStore.lineDone(id, line, ok, ok ? outputLine(cid, body) : errorLine(cid, line, error!));
        } finally {
          await metered;
        }
        return undefined;
      }
    }
    return undefined;
  }

  /**
   * Moves an async job to running ('run'), or says why it must not run (canceled, finished,
   * expired) with what acknowledging its entry writes.
   */
  async startJob(jobId: string, data: RunJobData): Promise<'run' | LiveOutcome | undefined> {
    const id = data.job!;
    const state = await this.jobStore.start(id, this.o.replica);
    if (state === 'running') return 'run';
    if (state === 'cancel') {
      const zero = unrunTiming(sinceEnqueued(data));
      return this.deliver(jobId, data, { rid: data.rid, status: 499, replica: this.o.replica, timing: zero }, CANCELED_BODY, { canceled: true });
    }
    if (!isTerminal(state)) return undefined;
    // Finished by an earlier run that died before its entry was acknowledged: queue the webhook
    // (deduped by id), and meter it from the record, unless the gateway finished it (a queued job
    // canceled: metered there). Metered only if this acknowledgement is the first.
    const [url, by, httpStatus, timing, result, finishedAt, spilled] = await this.o.redis.hmget(keys.job(id), 'webhook', 'finishedBy', 'httpStatus', 'timing', 'result', 'finishedAt', 'resultSpilled');
    if (url) await enqueueWebhook(this.webhooks(), { job: id, url });
    if (by !== 'replica') return undefined;
    const t = (JSON.parse(timing ?? 'null') as ReplyHeader['timing'] | null) ?? unrunTiming(0);
    const bytesOut = spilled === '1' ? await this.o.redis.strlen(keys.jobResult(id)) : Buffer.byteLength(result ?? '');
    const usage = this.usageRecord(jobId, data, { rid: data.rid, status: Number(httpStatus ?? 0), replica: this.o.replica, timing: t }, bytesOut, 'job');
    return { usage: { ...usage, at: finishedAt ?? usage.at } };
  }

  async close(): Promise<void> {
    await this.webhookQueue?.close();
  }

  private meter(u: UsageRecord): void {
    const m = this.metered;
    m.requests++;
    m.computeMs += Number.isFinite(u.computeMs) ? u.computeMs : 0;
    m.bytesIn += u.bytesIn;
    m.bytesOut += u.bytesOut;
  }

  private usageRecord(jobId: string, data: RunJobData, header: ReplyHeader, bytesOut: number, to: Destination['to']): UsageRecord {
    const { name, version } = this.o.manifest;
    const t = header.timing;
    return {
      id: jobId,
      tenant: data.t ?? 'default',
      key: data.k ?? 'unknown',
      fn: name,
      version,
      kind: USAGE_KIND[to],
      status: header.status,
      queueMs: t.queueMs,
      computeMs: t.handlerMs,
      inferMs: Math.round(t.inferMs * 100) / 100,
      coldMs: header.cold?.waitedMs ?? 0,
      bytesIn: data.bin ?? 0,
      bytesOut,
      at: new Date().toISOString(),
      ...(data.parent ? { parent: data.parent } : {}),
      ...(t.callMs ? { callMs: Math.round(t.callMs * 100) / 100 } : {}),
      price: this.price,
      cost: chargeOf(this.price, t.handlerMs),
    };
  }

  private webhooks(): Queue {
    return (this.webhookQueue ??= new Queue(WEBHOOK_QUEUE, { connection: this.o.redis, prefix: QUEUE_PREFIX }));
  }
}

function jsonOrUndefined(text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return undefined;
  }
}
