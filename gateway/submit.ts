// Submitting a run once its input is read and checked: admission (budget, rate, queue length,
// Redis memory, in-flight slot), the live queue, and for a sync run the wait for its reply. /v1/run
// and the Open Inference Protocol's infer share it, so both are keyed, limited, queued, metered
// and timed alike.
import type { CallerConnection } from './caller.ts';
import { randomUUID } from 'node:crypto';
import type { Context } from 'hono';
import type { ColdStartPhases, ReplyHeader, RunJobData } from '../core/contracts.ts';
import { enqueueStamp } from '../core/clock.ts';
import { JobStore } from '../core/jobs.ts';
import { keys } from '../core/keys.ts';
import { FunctionGoneError, KeyRejectedError } from '../core/live-queue.ts';
import { plainName } from '../core/names.ts';
import type { AuthContext } from '../core/tenants.ts';
import type { GatewayDeps, GatewayEnv } from './deps.ts';
import { ApiError, CallerGone, functionNotFound } from './errors.ts';
import type { ActiveFunction } from './functions-cache.ts';
import { invalidKey, revokedKey } from './middleware/auth.ts';
import type { Reply } from './replies.ts';
import { acquireSlot, checkRate } from './quotas.ts';

/** Waiting past the deadline by this much lets a reply that is on its way arrive. */
const REPLY_GRACE_MS = 2_000;

/** A run ready to queue: the function (by key), who pays, and what the replica gets. */
export interface Submission {
  /** The function's name as the caller gave it (for messages). */
  name: string;
  /** Its key: its queue, metrics and replicas. */
  key: string;
  fn: ActiveFunction;
  auth: AuthContext;
  rid: string;
  /** What RunJobData carries besides the queue's own fields. */
  data: Pick<RunJobData, 'input' | 'raw' | 'tensors'>;
  /** The input's JSON text as it came (queued as it is), and a binary body beside it. */
  payload: { inputJson?: string; body?: Buffer };
  /** The body's size, metered. */
  bytesIn: number;
}

/** What came back for a sync run: the reply, and the time since the route began. */
export interface SyncOutcome {
  header: ReplyHeader;
  body: Buffer;
  totalMs: number;
}

/** Runs an admission step; a refusal (429, 503 redis_full) is counted by function and code. */
async function counted<T>(deps: GatewayDeps, key: string, step: () => Promise<T>): Promise<T> {
  try {
    return await step();
  } catch (err) {
    if (err instanceof ApiError && (err.status === 429 || err.code === 'redis_full')) deps.metrics.refused.inc({ function: key, code: err.code });
    throw err;
  }
}

/** The admission steps every run takes before it is queued: the billed tenant's budgets, the caller's rate, the queue's length, Redis's memory. */
export async function admit(deps: GatewayDeps, s: Submission): Promise<void> {
  await counted(deps, s.key, async () => {
    const budget = deps.budgets.check(s.fn.tenant);
    if (budget) await budget;
    await checkRate(deps.redis, s.auth);
    await deps.queueDepth.check(s.key, s.fn.manifest.maxQueueLength ?? 10_000);
    await deps.redisMemory.check(s.bytesIn);
  });
}

function billing(s: Submission) {
  return { t: s.fn.tenant, k: s.auth.keyId, bin: s.bytesIn };
}

/** A sync run needs its reply to reach this gateway: after Redis comes back, not before it listens again (503). */
export function requireListening(deps: GatewayDeps): void {
  if (!deps.replies.listening) throw new ApiError(503, 'unavailable', 'this gateway is reconnecting to Redis and cannot receive replies yet; retry shortly');
}

/** A sync run queued: its id, its entry, its reply when it comes (null: none in time, or its caller left), and its end. */
export interface QueuedSync {
  /** The gateway's own id for it: its reply, in-flight slot, chunks and cancel go by it. */
  id: string;
  entry: string;
  reply: Promise<Reply | null>;
  /** Frees its slot and counts it under `status` (once). */
  end(status: number, queueMs?: number): void;
  /** The caller went away before the end: the request is taken back if no replica started it, else stopped there. */
  callerLeft(): Promise<void>;
}

/**
 * Queues a sync run (admit first). The reply and the in-flight slot go by an id of the gateway's
 * own (`id`, else a new one): the request id may be the caller's (x-request-id), and two callers,
 * of two tenants even, may send the same one. Time in the queue (cold starts included) and
 * handler time are bounded separately. `caller`: the caller's connection; when it closes, the
 * reply resolves null at once. `stream`: the caller reads the answer as events (stream-run.ts).
 */
export async function queueSync(deps: GatewayDeps, s: Submission, o: { id?: string; caller?: CallerConnection; stream?: boolean } = {}): Promise<QueuedSync> {
  const { replies, live, metrics } = deps;
  requireListening(deps);
  const stamp = enqueueStamp();
  const id = o.id ?? randomUUID();
  const data: RunJobData = { rid: s.rid, id, gw: deps.gatewayId, ...s.data, ...stamp, deadline: stamp.enq + deps.queueTimeoutMs, ...billing(s) };
  if (o.stream) data.stream = true;
  const waitMs = deps.queueTimeoutMs + s.fn.manifest.timeoutMs + REPLY_GRACE_MS;
  const release = await counted(deps, s.key, () => acquireSlot(deps.redis, s.auth, id, waitMs));
  if (o.caller?.left) {
    release();
    throw new CallerGone();
  }
  const reply = replies.expect(id, waitMs);
  const stopWatching = o.caller?.onLeave(() => replies.cancel(id));
  metrics.inflight.inc();
  let ended = false;
  const end = (status: number, queueMs?: number) => {
    if (ended) return;
    ended = true;
    stopWatching?.();
    metrics.inflight.dec();
    release();
    metrics.requests.inc({ function: s.key, status: String(status) });
    if (queueMs !== undefined) metrics.queue.observe({ function: s.key }, queueMs / 1000);
  };
  let entry: string;
  try {
    entry = await live.add(s.key, data, { keyHash: s.auth.verifyHash, ...s.payload, mustBeDeployed: true });
  } catch (err) {
    replies.cancel(id);
    stopWatching?.();
    metrics.inflight.dec();
    release();
    throw notQueued(deps, err, s.key, s.auth.keyId);
  }
  deps.wake(s.key);
  // Not read by a replica yet: it never runs; running: its replica stops it.
  const callerLeft = () => live.takeBack(s.key, entry, `${s.key} ${id}`).then(() => {}, () => {});
  return { id, entry, reply, end, callerLeft };
}

/** Queues a sync run and waits for its reply; nobody answering in time is a 504, a caller who left is CallerGone. */
export async function runSync(deps: GatewayDeps, s: Submission, t0: number, caller?: CallerConnection): Promise<SyncOutcome> {
  const q = await queueSync(deps, s, { caller });
  const reply = await q.reply;
  const totalMs = performance.now() - t0;
  deps.metrics.duration.observe({ function: s.key }, totalMs / 1000);
  if (!reply) return noReply(deps, s, q, caller);
  q.end(reply.header.status, reply.header.timing.queueMs);
  return { header: reply.header, body: reply.body, totalMs };
}

/**
 * A sync run that got no reply: its caller left (CallerGone), the connection its reply would come
 * on broke (503), or nobody answered in time (504); taken back if no replica started it.
 */
export async function noReply(deps: GatewayDeps, s: Submission, q: QueuedSync, caller?: CallerConnection): Promise<never> {
  const lost = deps.replies.takeLost(q.id);
  if (caller?.left) {
    q.end(499);
    await q.callerLeft();
    throw new CallerGone();
  }
  q.end(lost ? 503 : 504);
  await deps.live.takeBack(s.key, q.entry).catch(() => false);
  if (lost) throw repliesLost();
  throw new ApiError(504, 'timeout', `${s.name} did not answer in time (queue limit ${deps.queueTimeoutMs} ms + run limit ${s.fn.manifest.timeoutMs} ms); see \`embers functions show ${s.name}\``);
}

/** A sync run whose reply may have been missed: the gateway's Redis connection broke (a failover, a restart) while it waited. */
export function repliesLost(): ApiError {
  return new ApiError(503, 'unavailable', 'the gateway lost its connection to Redis (a restart or failover) while waiting for the answer; the run may or may not have happened: retry, or use an async run where it must happen once');
}

/** Queues an async run: its record first (so GET never misses it), then the job itself. Resolves with the job id. */
export async function runAsync(deps: GatewayDeps, s: Submission, webhook: string | undefined): Promise<string> {
  const id = JobStore.newId();
  const data: RunJobData = { rid: s.rid, ...s.data, ...enqueueStamp(), ...billing(s), job: id };
  try {
    await deps.jobs.create({ id, fn: s.key, tenant: s.fn.tenant, key: s.auth.keyId, webhook });
    await deps.live.add(s.key, data, { keyHash: s.auth.verifyHash, mustBeDeployed: true, ...s.payload });
  } catch (err) {
    await deps.redis.del(keys.job(id)).catch(() => 0);
    throw notQueued(deps, err, s.key, s.auth.keyId);
  }
  deps.wake(s.key);
  return id;
}

/**
 * Why LiveQueue.add queued nothing, as the caller's answer: the key the gateway had cached was
 * revoked or removed since (401), or the function was deleted after this gateway looked it up
 * (404); either is forgotten here. Anything else is Redis out of reach (503).
 */
function notQueued(deps: GatewayDeps, err: unknown, key: string, keyId: string): ApiError {
  if (err instanceof KeyRejectedError) {
    deps.keys.forget(err.keyHash);
    return err.reason === 'revoked' ? revokedKey(keyId) : invalidKey();
  }
  if (err instanceof FunctionGoneError) {
    deps.functions.forget(key);
    return functionNotFound(plainName(key), 'deleted');
  }
  return new ApiError(503, 'unavailable', `could not queue the request (Redis unreachable?): ${(err as Error).message}; retry shortly`);
}

/** Server-Timing (and Embers-Cold-Start when it waited for one) of a sync run's reply. */
export function setTimingHeaders(c: Context<GatewayEnv>, header: ReplyHeader, totalMs: number): void {
  c.header('server-timing', serverTiming(header, totalMs));
  if (header.cold) c.header('embers-cold-start', coldStartHeader(header.cold.phases));
}

/** A run's Server-Timing text. */
export function serverTiming(header: ReplyHeader, totalMs: number): string {
  const t = header.timing;
  const cold = header.cold ? `cold;dur=${round(header.cold.waitedMs)}, ` : '';
  // infer: how long the inferences it rode in ran, summed over its calls (usage meters its share).
  const call = t.callMs ? `, call;dur=${round(t.callMs)}` : '';
  return `${cold}queue;dur=${round(t.queueMs)}, input;dur=${t.inputMs}, batch;dur=${round(t.batchMs)}, infer;dur=${round(t.execMs)}, output;dur=${t.outputMs}${call}, handler;dur=${t.handlerMs}, total;dur=${round(totalMs)}`;
}


const round = (n: number) => Math.round(n * 100) / 100;

/** `spawn=612;bundle=98;model_fetch=0;model_load=505;setup=0;warmup=41;total=1262` (ms). */
export function coldStartHeader(p: ColdStartPhases): string {
  const parts: [string, number][] = [
    ['spawn', p.spawnMs],
    ['bundle', p.bundleMs],
    ['model_fetch', p.modelFetchMs],
    ['model_load', p.modelLoadMs],
    ['setup', p.setupMs],
    ['warmup', p.warmupMs],
    ['total', p.totalMs],
  ];
  return parts.map(([k, v]) => `${k}=${Math.round(v)}`).join(';');
}
