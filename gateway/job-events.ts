// GET /v1/jobs/:id/events: an async job's chunks as Server-Sent Events, from the first one kept
// or after a reconnecting caller's Last-Event-ID, then live as its replica adds them, until the
// job ends: a last `done` event (succeeded) or `error` (failed, canceled, expired) carries its
// status, HTTP status and timing. The chunks stay in Redis (core/chunks.ts), so any gateway can
// serve any reader any number of times; each reader reads them at its own pace.
import { callerOf } from './caller.ts';
import type { Context } from 'hono';
import type { Chunk } from '../core/chunks.ts';
import { isTerminal } from '../core/jobs.ts';
import { keys } from '../core/keys.ts';
import { ChunkReader } from './chunk-reader.ts';
import type { GatewayDeps, GatewayEnv } from './deps.ts';
import { eventStream, HEARTBEAT, SSE_HEADERS, sseEvent } from './sse.ts';
import { requireListening } from './submit.ts';

/** How long a reader waits for a notice before looking anyway (a job ended by a gateway sends none). */
const POLL_MS = 1_000;
/** A heartbeat comment goes out after this long without an event. */
const HEARTBEAT_MS = 15_000;

export async function jobEvents(c: Context<GatewayEnv>, deps: GatewayDeps, id: string, after: number): Promise<Response> {
  // Its notices come on this gateway's subscriber connection.
  requireListening(deps);
  const reader = new ChunkReader({ redis: deps.redis, hub: deps.replies, id, after, consume: false });
  await reader.open();
  let finished = false;
  let lastSent = performance.now();
  const close = () => {
    if (finished) return;
    finished = true;
    void reader.close();
  };
  callerOf(c).onLeave(close);
  const events = (chunks: Chunk[]) => {
    lastSent = performance.now();
    return chunks.map((ch) => sseEvent({ id: ch.seq, event: 'chunk', data: ch.data })).join('');
  };
  const next = async (): Promise<string | null> => {
    if (finished) return null;
    try {
      for (;;) {
        const chunks = await reader.read();
        if (finished) return null;
        if (chunks.length) return events(chunks);
        const status = await deps.redis.hget(keys.job(id), 'status');
        if (status === null || isTerminal(status)) {
          // Its chunks are all written before it ends: any that came since the read above.
          const rest = await reader.read();
          if (rest.length) return events(rest);
          const text = await lastEvent(deps, id);
          close();
          return text;
        }
        const idle = performance.now() - lastSent;
        if (idle >= HEARTBEAT_MS) {
          lastSent = performance.now();
          return HEARTBEAT;
        }
        await reader.wait(Math.min(POLL_MS, HEARTBEAT_MS - idle));
      }
    } catch {
      close();
      return sseEvent({ event: 'error', data: JSON.stringify({ status: 'unknown', error: { code: 'unavailable', message: 'the gateway lost Redis while reading the job; reconnect with Last-Event-ID to go on' } }) });
    }
  };
  return c.body(eventStream(next, close), 200, SSE_HEADERS);
}

/** The job's outcome as its stream's last event. */
async function lastEvent(deps: GatewayDeps, id: string): Promise<string> {
  const found = await deps.jobs.get(id, deps.publicUrl);
  if (!found || 'expired' in found) return sseEvent({ event: 'error', data: JSON.stringify({ status: 'expired', error: { code: 'job_expired', message: `job ${id} finished and its result has expired (EMBERS_JOB_RETENTION_S)` } }) });
  const { status, httpStatus, timing, error } = found.view;
  if (status === 'succeeded') return sseEvent({ event: 'done', data: JSON.stringify({ status, httpStatus, timing }) });
  return sseEvent({ event: 'error', data: JSON.stringify({ status, httpStatus, error, timing }) });
}
