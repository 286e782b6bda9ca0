// One request run on the user code, as its replica sees it: its caller may stop it (stops.ts), a
// handler that yields sends its chunks where they go (chunk-sink.ts), and its time is metered by
// the replica's clock, the user code's own split bounded by it.
import type { Redis } from 'ioredis';
import { addChunks, dropChunks } from '../../core/chunks.ts';
import { errorBody, type ReplyHeader, type RunJobData } from '../../core/contracts.ts';
import { CANCELED_BODY } from '../../core/jobs.ts';
import { keys } from '../../core/keys.ts';
import { ChunkSink } from './chunk-sink.ts';
import type { Calls } from './calls.ts';
import type { Delivered } from './delivery.ts';
import type { Stops } from './stops.ts';
import type { TailGate, TailWriter } from './tail.ts';
import { unrunTiming } from '../channel/timing.ts';
import type { UserCodeProcess } from './user-code-process.ts';
import type { CallRequest, RunMessage } from '../channel/messages.ts';

export interface RunContext {
  user: UserCodeProcess;
  redis: Redis;
  stops: Stops;
  /** The function's name (for messages) and handler budget (ms). */
  fn: string;
  timeoutMs: number;
  /** How long an async job's result is kept (s): its chunks live as long. */
  jobRetentionS: number;
  /** Where its handlers' calls to other functions go (absent: they are answered 501). */
  calls?: Calls;
  /** Whether the function is tailed, and where its tailed runs' `ctx.log` lines go. */
  tail?: { gate: TailGate; writer: TailWriter };
}

/** How a run ended: what its reply header and body carry, and what delivering it needs to know. */
export interface RunEnd extends Delivered {
  status: number;
  body: string;
  timing: ReplyHeader['timing'];
  /** A sync caller's streamed answer: the last chunk's sequence number (ReplyHeader.chunks). */
  chunks?: number;
}

/** How long a sync caller's chunks outlive the handler's budget should its gateway never read them. */
const CALLER_CHUNKS_GRACE_MS = 60_000;

export const DISCONNECTED_BODY = JSON.stringify(errorBody('client_disconnected', 'the caller went away before its answer; the handler was told to stop (ctx.signal)'));

export async function runOnUserCode(c: RunContext, data: RunJobData, queueMs: number, jobSignal?: AbortSignal): Promise<RunEnd> {
  const t0 = performance.now();
  // The caller's handle on it: an async job's id, or a sync run's gateway-minted id.
  const stopId = data.job ?? (data.gw ? data.id : undefined);
  const stop = stopId === undefined ? undefined : c.stops.enter(stopId);
  let n = 0;
  try {
    // Its caller left (or canceled) between this replica reading it and starting it.
    if (stop?.requested) return data.job ? { status: 499, body: CANCELED_BODY, canceled: true, timing: unrunTiming(queueMs) } : { status: 499, body: DISCONNECTED_BODY, disconnected: true, timing: unrunTiming(queueMs) };
    const streamId = data.job ?? (data.stream && data.gw ? data.id : undefined);
    const streamTo = streamId === undefined ? undefined : data.job ? 'job' : 'caller';
    const sink = streamId === undefined ? undefined : chunkSink(c, streamId, streamTo === 'job', () => n);
    const tail = c.tail?.gate.on() ? c.tail.writer : undefined;
    // The user code checks the input against the function's schema and runs the handler.
    // A call from another function's handler rides below live traffic when its caller is a batch line, and has what its caller has left.
    const below = data.batch !== undefined || data.below === true;
    const message: Omit<RunMessage, 'type' | 'n' | 'rawBytes'> = { rid: data.rid, input: data.input, raw: data.raw, tensors: data.tensors, deadline: data.deadline, batch: below, queueMs, streamTo, ...(tail ? { tail: true as const } : {}), ...(data.endBy ? { endBy: data.endBy } : {}) };
    const budgetMs = data.endBy ? Math.max(1, Math.min(c.timeoutMs, data.endBy - Date.now())) : c.timeoutMs;
    const endBy = Date.now() + budgetMs;
    const calls = c.calls;
    const onCall = calls && ((req: CallRequest) => calls.start({ n, data, endBy, below, lends: data.batch === undefined }, req));
    // A live run's time is bounded here too: its handler may hold the process's thread.
    const run = c.user.run(message, { onChunk: sink?.take, onLog: tail && ((call: unknown) => tail.log(data.rid, call)), onCall, timeoutMs: data.batch === undefined ? budgetMs : undefined });
    n = run.n;
    if (stop) stop.onStop = () => c.user.abort(n, true);
    jobSignal?.addEventListener('abort', () => c.user.abort(n, false), { once: true });
    const r = await run.result;
    const callMs = calls?.endRun(n) ?? 0;
    await sink?.close();
    const handlerMs = Math.round((performance.now() - t0) * 100) / 100;
    const bound = (v: number | undefined) => Math.min(v ?? 0, handlerMs);
    const timing: RunEnd['timing'] = { queueMs, handlerMs, inferMs: bound(r.timing.inferMs), execMs: bound(r.timing.execMs), batchMs: bound(r.timing.batchMs), inputMs: bound(r.timing.inputMs), outputMs: bound(r.timing.outputMs) };
    if (callMs > 0) timing.callMs = Math.round(callMs * 100) / 100;
    let end: RunEnd;
    if (stop?.requested && !data.job) {
      // Whatever the handler did, a caller who left gets nothing: 499, metered as such. Its
      // gateway stopped reading: what was written after it removed the chunks goes too.
      if (streamTo === 'caller') await dropChunks(c.redis, streamId!).catch(() => {});
      end = { status: 499, body: DISCONNECTED_BODY, disconnected: true, timing };
    } else if (stop?.requested && r.canceled) {
      // A job whose handler stopped because it was canceled ends "canceled", not "failed".
      return { status: 499, body: CANCELED_BODY, canceled: true, timing };
    } else if (sink?.failure) {
      end = { status: 500, body: JSON.stringify(errorBody(sink.failure.code, `${c.fn}: ${sink.failure.why}`)), timing };
    } else {
      const bytes = r.bytes ? { contentType: r.bytes.contentType, bytes: r.bytes.data, headerLength: r.bytes.headerLength } : undefined;
      end = { status: r.status, body: r.body, bytes, timing };
    }
    // What a sync caller was sent as it came: its gateway reads through the last chunk.
    if (streamTo === 'caller' && (r.streamed || sink!.count > 0)) {
      end.chunks = sink!.last;
      end.streamedBytes = sink!.bytes;
    }
    return end;
  } finally {
    if (stopId !== undefined) c.stops.leave(stopId);
    if (n) c.calls?.endRun(n);
  }
}

/** Where the chunks of request `id` go: kept for its job, or left for its caller's gateway to read. */
function chunkSink(c: RunContext, id: string, kept: boolean, run: () => number): ChunkSink {
  const ttlMs = kept ? c.jobRetentionS * 1000 + c.timeoutMs : c.timeoutMs + CALLER_CHUNKS_GRACE_MS;
  return new ChunkSink({
    kept,
    write: (chunks) => addChunks(c.redis, id, chunks, { kept, ttlMs }),
    unread: () => c.redis.xlen(keys.chunks(id)),
    credit: (k) => c.user.credit(run(), k),
    fail: () => c.user.abort(run(), false),
  });
}
