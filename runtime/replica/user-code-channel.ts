// The replica's reader of its user-code process's channel, which is hostile input: the process runs
// the tenant's code, which may have replaced everything the platform put there. Every frame is
// bounded in size, the pipe is read no faster than a byte and frame budget allows (past it the
// reader pauses, so a flood waits in the process's own pipe and memory, not here), and every
// message is checked for shape and for its type's rate before it is handed on. A frame or message
// that breaks a bound is a violation: the replica ends the process (user-code-process.ts). The
// reader holds one frame being read and a run's bytes until the message that names them.
import type { Readable } from 'node:stream';
import { errorBody, type ReplyHeader } from '../../core/contracts.ts';
import { BYTES, FrameReader, MAX_MESSAGES_FRAME, MESSAGES } from '../channel/frames.ts';
import type { FromUserCode, UserStats } from '../channel/messages.ts';
import { unrunTiming } from '../channel/timing.ts';

/** The types a user-code process may send; anything else is a violation. */
const TYPES = new Set<FromUserCode['type']>(['standby', 'started', 'start_failed', 'result', 'chunk', 'log', 'stuck', 'stats', 'call', 'call_abort', 'call_credit']);

/** Log messages a second (and burst): twice what an honest process sends (runtime/user-code/tail-log.ts). */
export const LOG_MESSAGES_PER_S = 4000;
/** What the reader takes a second before it pauses the pipe: frames, bytes of messages frames, and ms of its own time reading them. */
export const FRAMES_PER_S = 20_000;
export const MESSAGE_BYTES_PER_S = 64 * 1024 * 1024;
export const READ_MS_PER_S = 250;

/** A token bucket on an injected clock (ms). */
export class Bucket {
  private tokens: number;
  private at: number;

  constructor(
    private readonly perS: number,
    private readonly now: () => number,
  ) {
    this.tokens = perS;
    this.at = now();
  }

  /** Takes `k`; false when there were not that many (the tokens go below zero: a debt paid first). */
  take(k = 1): boolean {
    const t = this.now();
    this.tokens = Math.min(this.perS, this.tokens + ((t - this.at) * this.perS) / 1000);
    this.at = t;
    this.tokens -= k;
    return this.tokens >= 0;
  }

  /** Ms until the debt is paid. */
  waitMs(): number {
    return this.tokens >= 0 ? 0 : Math.ceil((-this.tokens * 1000) / this.perS);
  }
}

export interface UserCodeReaderOptions {
  /** Largest run bytes frame (a long JSON body and a binary answer: EMBERS_MAX_ANSWER_BYTES and some). */
  maxBytesFrame: number;
  /** Whether run `n` may send bytes now (in flight, none held yet). */
  expectsBytes: (n: number) => boolean;
  onBytes: (n: number, bytes: Buffer) => void;
  /** A message of a known type and the right shape; its meaning is checked by the receiver. */
  onMessage: (m: FromUserCode) => void;
  onViolation: (why: string) => void;
  now?: () => number;
}

/** Reads the process's frames (see the file's comment). */
export class UserCodeReader {
  private readonly frames: FrameReader;
  private readonly frameBudget: Bucket;
  private readonly byteBudget: Bucket;
  private readonly logBudget: Bucket;
  private readonly timeBudget: Bucket;
  private readonly now: () => number;
  private resumeTimer?: NodeJS.Timeout;
  private broken = false;

  constructor(
    private readonly stream: Readable,
    private readonly o: UserCodeReaderOptions,
  ) {
    const now = (this.now = o.now ?? (() => performance.now()));
    this.timeBudget = new Bucket(READ_MS_PER_S, now);
    this.frameBudget = new Bucket(FRAMES_PER_S, now);
    this.byteBudget = new Bucket(MESSAGE_BYTES_PER_S, now);
    this.logBudget = new Bucket(LOG_MESSAGES_PER_S, now);
    this.frames = new FrameReader(stream, {
      maxBytes: { [MESSAGES]: MAX_MESSAGES_FRAME, [BYTES]: o.maxBytesFrame },
      // Refused at its header, before its bytes are read.
      accepts: (kind, n) => (kind === BYTES && !o.expectsBytes(n) ? `sent bytes for run ${n}, which is not running or has its bytes already` : undefined),
      onFrame: (kind, n, bytes) => this.timed(kind, n, bytes),
      onCorrupt: (why) => this.violation(why),
    });
  }

  /** Reads nothing more. */
  stop(): void {
    this.broken = true;
    clearTimeout(this.resumeTimer);
    this.stream.pause();
  }

  /**
   * One frame, its reading charged to the time budget; whatever reading it throws (a field the
   * checks did not foresee) is the sender's violation, never the replica's crash.
   */
  private timed(kind: number, n: number, bytes: Buffer): void {
    const t0 = this.now();
    try {
      this.frame(kind, n, bytes);
    } catch (err) {
      this.violation(`sent a message the replica could not read (${String((err as Error)?.message).slice(0, 120)})`);
    }
    if (!this.timeBudget.take(this.now() - t0)) this.pause(this.timeBudget.waitMs());
  }

  private frame(kind: number, n: number, bytes: Buffer): void {
    if (this.broken) return;
    const frames = this.frameBudget.take();
    const within = kind !== MESSAGES || this.byteBudget.take(bytes.length);
    if (!frames || !within) this.pause(Math.max(this.frameBudget.waitMs(), this.byteBudget.waitMs()));
    if (kind === BYTES) return this.o.onBytes(n, bytes);
    if (n !== 0) return this.violation('sent a messages frame with a run number');
    let messages: unknown;
    try {
      messages = JSON.parse(bytes.toString('utf8'));
    } catch {
      return this.violation('sent a messages frame that is not JSON');
    }
    if (!Array.isArray(messages) || messages.length === 0) return this.violation('sent a messages frame that is not a list of messages');
    for (const m of messages) {
      if (this.broken) return;
      const why = shapeProblem(m);
      if (why) return this.violation(why);
      // Lines only: a count of dropped lines may come with every answer.
      if ((m as FromUserCode).type === 'log' && (m as { call?: unknown }).call !== undefined && !this.logBudget.take()) return this.violation(`sent log lines faster than ${LOG_MESSAGES_PER_S} a second`);
      this.o.onMessage(m as FromUserCode);
    }
  }

  /** Over its budget: the pipe waits (in the process's own buffers) until the budget refills. */
  private pause(ms: number): void {
    if (this.resumeTimer || ms <= 0 || this.broken) return;
    this.stream.pause();
    this.resumeTimer = setTimeout(() => {
      this.resumeTimer = undefined;
      if (this.broken) return;
      // What was read after it paused (the rest of a chunk) is paid for before reading on.
      const debt = Math.max(this.frameBudget.waitMs(), this.byteBudget.waitMs(), this.timeBudget.waitMs());
      if (debt > 0) this.pause(debt);
      else this.stream.resume();
    }, ms);
    this.resumeTimer.unref();
  }

  private violation(why: string): void {
    if (this.broken) return;
    this.stop();
    this.frames.corrupt(why);
    this.o.onViolation(why);
  }
}

const isRun = (v: unknown) => Number.isSafeInteger(v) && (v as number) > 0;

/** What is wrong with a message's shape, for a person; undefined when it is a known type, well formed. */
export function shapeProblem(m: unknown): string | undefined {
  if (typeof m !== 'object' || m === null || Array.isArray(m)) return 'sent a message that is not an object';
  const { type, n } = m as { type?: unknown; n?: unknown };
  if (typeof type !== 'string' || !TYPES.has(type as FromUserCode['type'])) return `sent a message of unknown type ${typeof type === 'string' ? JSON.stringify(type.slice(0, 40)) : `(a ${typeof type})`}`;
  if ((type === 'result' || type === 'chunk' || type === 'stuck') && !isRun(n)) return `sent a ${type} message without a run number`;
  if (type === 'chunk' && typeof (m as { data?: unknown }).data !== 'string') return 'sent a chunk that is not JSON text';
  if (type === 'log' && !(n === 0 || isRun(n))) return 'sent a log message without a run number';
  if (type === 'call' || type === 'call_abort' || type === 'call_credit') {
    const c = m as { c?: unknown; k?: unknown; name?: unknown; input?: unknown; timeoutMs?: unknown; stream?: unknown };
    if (!isRun(c.c)) return `sent a ${type} without a call number`;
    if (type === 'call_abort') return undefined;
    if (type === 'call_credit') return isRun(c.k) ? undefined : 'sent a call credit that is not a positive whole number';
    if (!isRun(n)) return 'sent a call without a run number';
    if (typeof c.name !== 'string' || c.name.length > 63) return 'sent a call without a function name';
    if (typeof c.input !== 'string') return 'sent a call whose input is not JSON text';
    if (c.timeoutMs !== undefined && !isRun(c.timeoutMs)) return 'sent a call with a timeout that is not a whole number of ms';
    if (c.stream !== undefined && c.stream !== true) return 'sent a call with a stream flag that is not true';
  }
  return undefined;
}

type Result = Extract<FromUserCode, { type: 'result' }>;
export type CheckedResult = Omit<Result, 'type' | 'n' | 'bytes' | 'body' | 'bodyBytes'> & { body: string; bytes?: { contentType: string; data: Buffer; headerLength?: number } };

/** Content types a handler may answer with: a token/token, parameters without line breaks. */
const CONTENT_TYPE = /^[\w!#$&^.+-]+\/[\w!#$&^.+-]+(?:\s*;[^\r\n]*)?$/;

/**
 * What the replica takes from an answer: a status a handler may give, a JSON body (in the message,
 * or the first `bodyBytes` of `data`), bytes with a content type that cannot break a header,
 * within the answer bound; anything else is answered 500 invalid_answer.
 */
export function checkResult(m: Result, maxAnswerBytes: number, data?: Buffer): CheckedResult {
  const invalid = (why: string): CheckedResult => ({ status: 500, body: JSON.stringify(errorBody('invalid_answer', `the function's process sent an answer the platform cannot use: ${why}`)), timing: unrunTiming(0) });
  const max = maxAnswerBytes;
  if (!Number.isInteger(m.status) || m.status < 200 || m.status > 599) return invalid('status');
  let body = m.body;
  let binary = data;
  if (m.bodyBytes !== undefined) {
    if (!Number.isSafeInteger(m.bodyBytes) || m.bodyBytes < 0 || !data || m.bodyBytes > data.length) return invalid('body length');
    body = data.subarray(0, m.bodyBytes).toString('utf8');
    binary = data.subarray(m.bodyBytes);
  } else if (m.bytes === undefined && data?.length) return invalid('bytes without a binary answer');
  // A JSON body is measured in UTF-16 units here; the process bounds it in bytes.
  if (typeof body !== 'string') return invalid('body');
  if (body.length > max) return invalid('body too large');
  const t = m.timing as Record<string, unknown> | undefined;
  const timing = unrunTiming(0);
  for (const k of Object.keys(timing) as (keyof ReplyHeader['timing'])[]) {
    const v = t?.[k];
    if (typeof v === 'number' && Number.isFinite(v) && v >= 0) timing[k] = v;
  }
  let bytes: CheckedResult['bytes'];
  if (m.bytes !== undefined) {
    const { contentType, length, headerLength } = m.bytes as { contentType?: unknown; length?: unknown; headerLength?: unknown };
    if (typeof contentType !== 'string' || contentType.length > 200 || !CONTENT_TYPE.test(contentType)) return invalid('content type');
    if (!binary || length !== binary.length || binary.length > max) return invalid('bytes');
    if (headerLength !== undefined && !(Number.isSafeInteger(headerLength) && (headerLength as number) > 0 && (headerLength as number) <= binary.length)) return invalid('inference header length');
    bytes = { contentType, data: binary, ...(headerLength !== undefined ? { headerLength: headerLength as number } : {}) };
  } else if (binary?.length && m.bodyBytes !== undefined) return invalid('bytes without a binary answer');
  const checked: CheckedResult = { status: m.status, body, bytes, timing, canceled: m.canceled === true || undefined };
  if (m.streamed === true) checked.streamed = true;
  return checked;
}

/** A counter as the replica keeps it: a finite number, not below zero; anything else counts 0. */
const count = (v: unknown): number => (typeof v === 'number' && Number.isFinite(v) && v >= 0 ? v : 0);

/** A small map of counters ({ "1": 40, "4": 3 }): at most 64 keys of at most 16 characters. */
function counters(v: unknown): Record<string, number> {
  const out: Record<string, number> = {};
  if (typeof v !== 'object' || v === null) return out;
  for (const [k, n] of Object.entries(v).slice(0, 64)) if (k.length <= 16) out[k] = count(n);
  return out;
}

const median = (v: unknown): number | null => (v === null ? null : count(v));
const checkLone = (l: Record<string, unknown>) => ({ choice: l.choice === 'narrow' ? ('narrow' as const) : ('wide' as const), wide: median(l.wide) as number, narrow: median(l.narrow) as number });

/** The batch tuner's costs by batch size: at most 64, each { msPerRow, samples }. */
function costs(v: unknown): Record<string, { msPerRow: number; samples: number }> {
  const out: Record<string, { msPerRow: number; samples: number }> = {};
  if (typeof v !== 'object' || v === null) return out;
  for (const [k, c] of Object.entries(v).slice(0, 64)) {
    const o = (typeof c === 'object' && c !== null ? c : {}) as Record<string, unknown>;
    if (k.length <= 16) out[k] = { msPerRow: count(o.msPerRow), samples: count(o.samples) };
  }
  return out;
}

const text = (v: unknown, max: number): string | undefined => (typeof v === 'string' ? v.slice(0, max) : undefined);

/**
 * The stats a process sent, rebuilt from what the replica knows: only the models it was given,
 * counters that are finite and not negative, bounded text. They go into the replica's record and
 * the agent's metrics, which must not take a value from the user code as it came.
 */
export function checkStats(raw: unknown, modelNames: readonly string[]): UserStats {
  const r = (typeof raw === 'object' && raw !== null ? raw : {}) as Record<string, Record<string, unknown> | undefined>;
  const models: UserStats['models'] = {};
  for (const name of modelNames) {
    const m = r.models?.[name];
    if (typeof m !== 'object' || m === null) continue;
    const s = m as Record<string, unknown>;
    const lone = s.lone;
    const fallback = text(s.fallback, 500);
    models[name] = {
      provider: text(s.provider, 32) ?? 'unknown',
      ...(fallback !== undefined ? { fallback } : {}),
      instances: count(s.instances),
      ...(typeof lone === 'object' && lone !== null ? { lone: checkLone(lone as Record<string, unknown>) } : {}),
      requests: count(s.requests),
      inferences: count(s.inferences),
      executions: count(s.executions),
      maxCallsPerBatch: count(s.maxCallsPerBatch),
      callsPerBatch: counters(s.callsPerBatch),
      inferMsTotal: count(s.inferMsTotal),
      wide: count(s.wide),
      failures: count(s.failures),
      cap: count(s.cap),
      costPerRow: costs(s.costPerRow),
    };
  }
  return {
    liveFirst: { yields: count(r.liveFirst?.yields), heldMs: count(r.liveFirst?.heldMs) },
    gc: { count: count(r.gc?.count), ms: count(r.gc?.ms) },
    models,
  };
}
