// A handler's calls to other functions (`ctx.call`), on the trusted side: the user code only asks
// (runtime/user-code/calls.ts); this replica decides. The name is looked up among the calling
// request's tenant's functions only (another tenant's is as missing as none), the call passes the
// same admission as an HTTP request of the caller's key (budget, rate, in-flight, queue length),
// and it is queued on the callee's live stream as a sync run whose reply comes to this replica's
// own channel. It gets what is left of the caller's time, rides below live traffic when the
// caller is a batch line, and is stopped (taken back, or canceled where it runs) when the caller
// ends or lets go of it. decisions/043 records how slots, deadlines and metering work.
import { randomUUID } from 'node:crypto';
import type { Redis } from 'ioredis';
import { enqueueStamp } from '../../core/clock.ts';
import { errorBody, FUNCTION_NAME, type RunJobData } from '../../core/contracts.ts';
import { FunctionGoneError, KeyRejectedError, type LiveQueue } from '../../core/live-queue.ts';
import { keys, tenantKeys } from '../../core/keys.ts';
import type { Logger } from '../../core/log.ts';
import { baseKey, qualifiedName } from '../../core/names.ts';
import { TenantStore, type AuthContext, type KeyLimits } from '../../core/tenants.ts';
import { BudgetGate } from '../../gateway/budget-gate.ts';
import { ChunkReader } from '../../gateway/chunk-reader.ts';
import type { FunctionsCache } from '../../gateway/functions-cache.ts';
import { acquireSlot, checkRate, QueueDepth, RedisMemory } from '../../gateway/quotas.ts';
import { ReplyHub, type Reply } from '../../gateway/replies.ts';
import type { CallRequest } from '../channel/messages.ts';
import { forwardChunks } from './call-chunks.ts';

/** Calls one run may have waiting at once, and this replica in all, and their input in all: more are answered 429. */
export const CALLS_PER_RUN = 64;
export const CALLS_PER_REPLICA = 1024;
export const CALL_INPUT_BYTES_PER_REPLICA = 64 * 2 ** 20;

/** A reply on its way when the call's time ran out still gets this long. */
const REPLY_GRACE_MS = 1_000;
/** How long a key's record (its hash and limits) is taken from memory. */
const KEY_FRESH_MS = 5_000;
/** A caller → callee edge is written at most this often (the console's "calls" lists). */
const EDGE_EVERY_MS = 10_000;
/** Edges are kept this long: the console lists the last hour's. */
export const EDGE_TTL_S = 2 * 3600;

/** The calling request, as this replica knows it (never as its user code says). */
export interface CallingRun {
  n: number;
  data: RunJobData;
  /** By when (ms since epoch) its own answer is due: its calls get what is left. */
  endBy: number;
  /** A batch line's calls ride below live traffic. */
  below: boolean;
  /** It holds a live slot, which it lends while it waits on calls. */
  lends: boolean;
}

/** What the replica's calls need. */
export interface CallsOptions {
  redis: Redis;
  /** This replica's id: its calls' replies come to its channel. */
  replica: string;
  /** The calling function's key, for the edges the console lists. */
  fn: string;
  live: LiveQueue;
  functions: FunctionsCache;
  maxDepth: number;
  queueTimeoutMs: number;
  /** EMBERS_REDIS_MEMORY_LIMIT_MB in bytes, as the gateways admit by it (undefined: their default). */
  redisMemoryLimitBytes?: number;
  /** Answers and chunks, to the user code. */
  answer: (c: number, status: number, body: string) => void;
  chunk: (c: number, data: string) => void;
  /** Lends a live slot while a run waits on calls (false: none could be lent), and takes it back. */
  lend: () => boolean;
  reclaim: () => void;
  wake: (key: string) => void;
  log: Logger;
}

interface OpenCall {
  n: number;
  key?: string;
  entry?: string;
  id: string;
  startedAt: number;
  /** Its input's length, counted against CALL_INPUT_BYTES_PER_REPLICA until it ends. */
  inputBytes: number;
  /** A streamed call: the user code took `k` more chunks (credit). */
  credit: (k: number) => void;
  /** Its caller let go of it (maybe while it was still being admitted: then it is never queued). */
  stopped: boolean;
  /** Ends the call now: its reply is no longer awaited. */
  stop: () => void;
}

/** A run's calls: those open, and their time so far (ms, calls in parallel counted each). */
interface RunCalls {
  open: Set<number>;
  ms: number;
  /** Its slot is lent now. */
  lent: boolean;
}

class CallRefused extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

export class Calls {
  private readonly open = new Map<number, OpenCall>();
  private readonly runs = new Map<number, RunCalls>();
  private hub?: Promise<ReplyHub>;
  private sub?: Redis;
  private readonly budgets: BudgetGate;
  private readonly depth: QueueDepth;
  private readonly memory: RedisMemory;
  private readonly tenants: TenantStore;
  private readonly keyRecords = new Map<string, { at: number; value: Promise<{ hash: string; limits?: KeyLimits } | null> }>();
  private readonly edges = new Map<string, number>();
  /** Bytes of input of the calls open now. */
  private inputBytes = 0;

  constructor(private readonly o: CallsOptions) {
    this.budgets = new BudgetGate(o.redis);
    this.depth = new QueueDepth(o.live);
    this.memory = new RedisMemory(o.redis, o.redisMemoryLimitBytes);
    this.tenants = new TenantStore(o.redis);
  }

  /** Starts a call of `run`'s handler; its answer goes back through `answer`. */
  start(run: CallingRun, req: CallRequest): void {
    const { c } = req;
    if (this.open.has(c)) return this.o.answer(c, 400, JSON.stringify(errorBody('invalid_call', `call number ${c} is in use`)));
    let calls = this.runs.get(run.n);
    const inputBytes = Buffer.byteLength(req.input);
    if ((calls?.open.size ?? 0) >= CALLS_PER_RUN || this.open.size >= CALLS_PER_REPLICA || this.inputBytes + inputBytes > CALL_INPUT_BYTES_PER_REPLICA) {
      return this.o.answer(c, 429, JSON.stringify(errorBody('too_many_calls', `a request may wait on ${CALLS_PER_RUN} calls at once (a replica on ${CALLS_PER_REPLICA}, with ${CALL_INPUT_BYTES_PER_REPLICA / 2 ** 20} MiB of input in all); await some before making more`)));
    }
    if (!calls) this.runs.set(run.n, (calls = { open: new Set(), ms: 0, lent: false }));
    const call: OpenCall = { n: run.n, id: randomUUID(), startedAt: performance.now(), inputBytes, stopped: false, stop: () => void (call.stopped = true), credit: () => {} };
    this.inputBytes += inputBytes;
    this.open.set(c, call);
    calls.open.add(c);
    if (calls.open.size === 1 && run.lends) calls.lent = this.o.lend();
    void this.run(run, req, call).then(
      ({ status, body }) => this.end(c, status, body),
      (err: unknown) => {
        const e = err instanceof CallRefused ? err : new CallRefused(503, 'unavailable', `the call could not be made: ${(err as Error)?.message ?? err}`);
        if (!(err instanceof CallRefused)) this.o.log.warn({ err: (err as Error)?.message, rid: run.data.rid, callee: req.name }, 'call failed');
        this.end(c, e.status, JSON.stringify(errorBody(e.code, e.message)));
      },
    );
  }

  /** The handler read `k` more of streamed call c's chunks (at most the window is owed). */
  credit(c: number, k: number): void {
    this.open.get(c)?.credit(k);
  }

  /** The handler let go of call c (its signal aborted, it stopped reading a stream). */
  abort(c: number): void {
    this.open.get(c)?.stop();
  }

  /** Run n ended: its calls still open are stopped; resolves its time in calls (ms). */
  endRun(n: number): number {
    const calls = this.runs.get(n);
    if (!calls) return 0;
    for (const c of calls.open) this.open.get(c)?.stop();
    this.runs.delete(n);
    this.giveBack(calls);
    return calls.ms;
  }

  /** Stops every call (the replica is going away) and closes the reply channel. */
  close(): void {
    for (const call of this.open.values()) call.stop();
    this.sub?.disconnect();
  }

  private end(c: number, status: number, body: string): void {
    const call = this.open.get(c);
    if (!call) return;
    this.open.delete(c);
    this.inputBytes -= call.inputBytes;
    const calls = this.runs.get(call.n);
    if (calls?.open.delete(c)) {
      calls.ms += performance.now() - call.startedAt;
      if (calls.open.size === 0) this.giveBack(calls);
    }
    // The run may have ended meanwhile: its user code ignores an answer nobody waits for.
    this.o.answer(c, status, body);
  }

  private giveBack(calls: RunCalls): void {
    if (!calls.lent) return;
    calls.lent = false;
    this.o.reclaim();
  }

  private async run(run: CallingRun, req: CallRequest, call: OpenCall): Promise<{ status: number; body: string }> {
    const { data } = run;
    const depth = (data.depth ?? 0) + 1;
    if (depth > this.o.maxDepth) throw new CallRefused(508, 'call_depth_exceeded', `calling ${req.name} would make a chain of ${depth} calls; the platform allows ${this.o.maxDepth} (EMBERS_MAX_CALL_DEPTH)`);
    // Checked, not kept: the queue writes the text as it came.
    try {
      JSON.parse(req.input);
    } catch {
      throw new CallRefused(400, 'invalid_input', `the input of the call to ${req.name} is not JSON`);
    }
    // One deadline, fixed now: admission's time comes out of it.
    const endBy = Math.min(run.endBy, Date.now() + (req.timeoutMs ?? Infinity));
    if (endBy <= Date.now()) throw new CallRefused(504, 'timeout', `the calling request has no time left to call ${req.name}`);
    const tenant = data.t;
    if (!tenant) throw new CallRefused(403, 'calls_unavailable', 'this request has no tenant to call other functions as');
    // A name a function cannot have is answered as a missing one before any lookup: nothing about
    // another tenant's functions (a legacy key, a version key) is read on its behalf.
    const missing = () => new CallRefused(404, 'function_not_found', `no function named ${req.name}`);
    if (!FUNCTION_NAME.test(req.name)) throw missing();
    const found = await this.o.functions.find(tenant, req.name);
    if (!found) {
      // Misses are not kept: a handler trying names must not grow this replica's cache.
      this.o.functions.forget(qualifiedName(tenant, req.name));
      this.o.functions.forget(req.name);
      throw missing();
    }
    const served = this.o.functions.serving(found, undefined);
    const { key, fn } = served instanceof Promise ? await served : served;
    // The same admission as the caller's own HTTP request: its tenant's budget, its key's limits, the callee's queue, Redis's memory.
    const keyRecord = data.k ? await this.keyRecord(tenant, data.k) : null;
    const auth: AuthContext = { tenant, keyId: data.k ?? 'unknown', scopes: ['run'], admin: false, ...(keyRecord?.limits ? { limits: keyRecord.limits } : {}) };
    let release = () => {};
    try {
      const budget = this.budgets.check(fn.tenant);
      if (budget) await budget;
      await checkRate(this.o.redis, auth);
      await this.depth.check(key, fn.manifest.maxQueueLength ?? 10_000);
      await this.memory.check(Buffer.byteLength(req.input));
      release = await acquireSlot(this.o.redis, auth, call.id, Math.max(0, endBy - Date.now()) + REPLY_GRACE_MS);
    } catch (err) {
      const e = err as { status?: number; code?: string; message?: string };
      if (typeof e.status === 'number' && typeof e.code === 'string') throw new CallRefused(e.status, e.code, e.message ?? e.code);
      throw err;
    }
    try {
      return await this.queue(run, req, call, { key, depth, endBy, keyHash: keyRecord?.hash });
    } finally {
      release();
    }
  }

  private async queue(run: CallingRun, req: CallRequest, call: OpenCall, q: { key: string; depth: number; endBy: number; keyHash?: string }): Promise<{ status: number; body: string }> {
    const { data } = run;
    const hub = await this.replies();
    const stamp = enqueueStamp();
    const { endBy } = q;
    const callee: RunJobData = {
      rid: `${data.rid}.${req.c}`,
      id: call.id,
      gw: this.o.replica,
      // The input's text is queued as it came (inputJson).
      input: null,
      ...stamp,
      deadline: Math.min(stamp.enq + this.o.queueTimeoutMs, endBy),
      endBy,
      parent: data.rid,
      depth: q.depth,
      ...(req.stream ? { stream: true as const } : {}),
      ...(run.below ? { below: true as const } : {}),
      t: data.t,
      k: data.k,
      bin: Buffer.byteLength(req.input),
    };
    const canceled = () => new CallRefused(499, 'call_canceled', `the call to ${req.name} was stopped by its caller`);
    if (call.stopped) throw canceled();
    let wakeStop = () => {};
    const stoppedNow = new Promise<null>((resolve) => (wakeStop = () => resolve(null)));
    call.stop = () => {
      call.stopped = true;
      hub.cancel(call.id);
      wakeStop();
    };
    const reply = hub.expect(call.id, Math.max(0, endBy - Date.now()) + REPLY_GRACE_MS);
    let entry: string;
    try {
      entry = await this.o.live.add(q.key, callee, { inputJson: req.input, mustBeDeployed: true, ...(q.keyHash ? { keyHash: q.keyHash } : {}) });
    } catch (err) {
      hub.cancel(call.id);
      if (err instanceof KeyRejectedError) throw new CallRefused(401, 'invalid_api_key', `the API key of the calling request was ${err.reason === 'revoked' ? 'revoked' : 'removed'}`);
      if (err instanceof FunctionGoneError) throw new CallRefused(404, 'function_not_found', `no function named ${req.name}`);
      throw err;
    }
    call.key = q.key;
    call.entry = entry;
    this.o.wake(q.key);
    this.noteEdge(q.key);
    const takeBack = () => this.o.live.takeBack(q.key, entry, `${q.key} ${call.id}`).catch(() => false);
    if (call.stopped) {
      await takeBack();
      throw canceled();
    }
    const reader = req.stream ? new ChunkReader({ redis: this.o.redis, hub, id: call.id, consume: true }) : undefined;
    const streaming = reader ? forwardChunks(reader, call, (data) => this.o.chunk(req.c, data)) : undefined;
    let answered = false;
    try {
      await reader?.open();
      const r = await Promise.race([reply, stoppedNow]);
      if (!r) {
        if (call.stopped) throw canceled();
        throw new CallRefused(504, 'timeout', `${req.name} did not answer within the ${Math.round(endBy - stamp.enq)} ms its caller had left`);
      }
      answered = true;
      if (reader) await streaming!.through(r.header.chunks ?? 0);
      return { status: r.header.status, body: bodyOf(r) };
    } finally {
      // Not answered, for whatever reason: never run, or stopped where it runs.
      if (!answered) {
        hub.cancel(call.id);
        await takeBack();
      }
      streaming?.stop();
      await reader?.close();
    }
  }

  /** The reply channel of this replica, subscribed on first use. */
  private replies(): Promise<ReplyHub> {
    return (this.hub ??= (async () => {
      const sub = (this.sub = this.o.redis.duplicate());
      sub.on('error', () => {});
      const hub = new ReplyHub(sub, this.o.replica, undefined, (channel, err) => this.o.log.warn({ channel, err: err.message }, 'unreadable reply dropped'));
      await hub.start();
      return hub;
    })().catch((err: unknown) => {
      this.hub = undefined;
      throw err;
    }));
  }

  /** The caller's key's hash (the queueing call checks it is still valid) and limits. */
  private keyRecord(tenant: string, keyId: string): Promise<{ hash: string; limits?: KeyLimits } | null> {
    const id = `${tenant} ${keyId}`;
    const hit = this.keyRecords.get(id);
    if (hit && performance.now() - hit.at < KEY_FRESH_MS) return hit.value;
    const value = (async () => {
      const hash = await this.o.redis.hget(tenantKeys.tenantKeys(tenant), keyId);
      const key = hash ? await this.tenants.resolveHash(hash) : null;
      return hash && key ? { hash, ...(key.limits ? { limits: key.limits } : {}) } : null;
    })();
    this.keyRecords.set(id, { at: performance.now(), value });
    value.catch(() => this.keyRecords.delete(id));
    return value;
  }

  /** Who called whom in the last hour, for the console (EDGE_EVERY_MS apart at most per pair). */
  private noteEdge(callee: string): void {
    const now = Date.now();
    if (now - (this.edges.get(callee) ?? -Infinity) < EDGE_EVERY_MS) return;
    this.edges.set(callee, now);
    // By function, not version: a split's version key at either end counts toward its function.
    const [from, to] = [baseKey(this.o.fn), baseKey(callee)];
    const [out, into] = [keys.callsOut(from), keys.callsIn(to)];
    void this.o.redis.multi().zadd(out, now, to).expire(out, EDGE_TTL_S).zadd(into, now, from).expire(into, EDGE_TTL_S).exec().catch(() => {});
  }
}

/** A reply's body for the calling handler: JSON as it came; bytes as `{ contentType, base64 }`, as async jobs carry them. */
function bodyOf(r: Reply): string {
  if (!r.header.type) return r.body.toString('utf8');
  return JSON.stringify({ contentType: r.header.type, base64: r.body.toString('base64') });
}
