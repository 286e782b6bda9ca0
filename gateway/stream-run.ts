// A sync run whose caller reads its answer as Server-Sent Events (Accept: text/event-stream). It
// is queued as any sync run, marked `stream`: a handler that yields has its chunks written as they
// come to the run's chunk stream (core/chunks.ts), which this gateway reads as the caller's socket
// drains and removes as it goes, so a caller reading slowly pauses the handler (its replica gives
// no more credit) rather than filling a buffer. Nothing is sent before the first chunk or the
// reply: a run that fails before yielding anything answers with its status as a plain run does.
// Events: `chunk` (id: its sequence number, data: its JSON) as they come, then `done` (status and
// the timing Server-Timing carries) or `error` (with the error too); a comment while idle.
import { callerOf } from './caller.ts';
import type { Context } from 'hono';
import type { Chunk } from '../core/chunks.ts';
import { ChunkReader } from './chunk-reader.ts';
import type { GatewayDeps, GatewayEnv } from './deps.ts';
import type { Reply } from './replies.ts';
import { answerAsChunk, eventStream, finalEvent, HEARTBEAT, SSE_HEADERS, sseEvent } from './sse.ts';
import { noReply, queueSync, repliesLost, requireListening, type QueuedSync, type Submission, type SyncOutcome } from './submit.ts';
import { randomUUID } from 'node:crypto';

/** How long a reader waits for a notice before looking anyway. */
const POLL_MS = 1_000;
/** A heartbeat comment goes out after this long without an event. */
const HEARTBEAT_MS = 15_000;
/** After the reply, how long chunks it counts may take to be read before the stream ends without them. */
const TAIL_MS = 5_000;
const TAIL_POLL_MS = 50;

/**
 * Runs a submission for a caller that asked for events: the response (events), or, when the run
 * failed before yielding anything, its outcome for the route to answer as a plain run's.
 */
export async function runStreamed(c: Context<GatewayEnv>, deps: GatewayDeps, s: Submission, t0: number): Promise<Response | SyncOutcome> {
  requireListening(deps);
  const caller = callerOf(c);
  const id = randomUUID();
  const reader = new ChunkReader({ redis: deps.redis, hub: deps.replies, id, consume: true });
  let queued: QueuedSync;
  try {
    await reader.open();
    queued = await queueSync(deps, s, { id, caller, stream: true });
  } catch (err) {
    await reader.close();
    throw err;
  }
  let reply: Reply | null | undefined;
  void queued.reply.then((r) => {
    reply = r;
    reader.poke();
  });
  // Until the first chunk, or the reply, or the caller leaves (the reply is then null); after
  // HEARTBEAT_MS of waiting (a cold start), the events begin with a heartbeat.
  const began = performance.now();
  let first: Chunk[] = [];
  try {
    while (reply === undefined && first.length === 0 && performance.now() - began < HEARTBEAT_MS) first = await reader.next(POLL_MS);
  } catch (err) {
    queued.end(503);
    await Promise.all([reader.close(), queued.callerLeft()]);
    throw err;
  }
  const totalMs = () => performance.now() - t0;
  if (!first.length && reply === null) {
    await reader.close();
    deps.metrics.duration.observe({ function: s.key }, totalMs() / 1000);
    return noReply(deps, s, queued, caller);
  }
  // A reply before any chunk was read: one that yielded nothing and failed answers as a plain run.
  const early = reply;
  if (!first.length && early && early.header.status >= 400 && (early.header.chunks ?? 0) <= reader.after) {
    await reader.close();
    deps.metrics.duration.observe({ function: s.key }, totalMs() / 1000);
    queued.end(early.header.status, early.header.timing.queueMs);
    return { header: early.header, body: early.body, totalMs: totalMs() };
  }
  let pending = first.length ? first.map(chunkEvent).join('') : early ? '' : HEARTBEAT;

  let finished = false;
  let lastSent = performance.now();
  let tailUntil: number | undefined;
  const finish = (status: number, queueMs?: number) => {
    if (finished) return false;
    finished = true;
    deps.replies.takeLost(queued.id);
    deps.metrics.duration.observe({ function: s.key }, totalMs() / 1000);
    queued.end(status, queueMs);
    void reader.close();
    return true;
  };
  const gone = () => {
    if (finish(499)) void queued.callerLeft();
  };
  caller.onLeave(gone);
  const next = async (): Promise<string | null> => {
    if (finished) return null;
    if (pending) {
      const text = pending;
      pending = '';
      lastSent = performance.now();
      return text;
    }
    for (;;) {
      let chunks: Chunk[];
      try {
        chunks = await reader.read();
      } catch {
        // Redis went away mid-stream: the caller hears it, and the replica stops on its own time.
        if (!finish(503)) return null;
        return sseEvent({ event: 'error', data: JSON.stringify({ status: 503, error: { code: 'unavailable', message: 'the gateway lost Redis while reading the answer; run it again' } }) });
      }
      if (finished) return null;
      if (chunks.length) {
        lastSent = performance.now();
        return chunks.map(chunkEvent).join('');
      }
      const r = reply;
      if (r === null && deps.replies.takeLost(queued.id)) {
        finish(503);
        const lost = repliesLost();
        return sseEvent({ event: 'error', data: JSON.stringify({ status: 503, error: { code: lost.code, message: lost.message } }) });
      }
      if (r === null) {
        finish(504);
        return sseEvent({ event: 'error', data: JSON.stringify({ status: 504, error: { code: 'timeout', message: `${s.name} did not finish in time (run limit ${s.fn.manifest.timeoutMs} ms)` } }) });
      }
      if (r) {
        // Its chunks are all written before its reply: read through the last it counts, for TAIL_MS at most.
        tailUntil ??= performance.now() + TAIL_MS;
        if (reader.after >= (r.header.chunks ?? 0) || performance.now() > tailUntil) {
          const ms = totalMs();
          finish(r.header.status, r.header.timing.queueMs);
          // A handler that returned instead of yielding: its answer is the one chunk.
          const answer = r.header.chunks === undefined && r.header.status < 400 ? sseEvent({ id: 1, event: 'chunk', data: answerAsChunk(r.header, r.body) }) : '';
          return answer + finalEvent(r.header, r.body, ms);
        }
        await reader.wait(TAIL_POLL_MS);
        continue;
      }
      const idle = performance.now() - lastSent;
      if (idle >= HEARTBEAT_MS) {
        lastSent = performance.now();
        return HEARTBEAT;
      }
      await reader.wait(Math.min(POLL_MS, HEARTBEAT_MS - idle));
    }
  };
  return c.body(eventStream(next, gone), 200, SSE_HEADERS);
}

const chunkEvent = (c: Chunk) => sseEvent({ id: c.seq, event: 'chunk', data: c.data });
