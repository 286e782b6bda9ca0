// Server-Sent Events as this API writes them: `id`, `event` and `data` lines, a blank line after
// each event, comments as heartbeats. A response body is pulled as the caller's socket drains, so
// what is read from Redis for it is read at the caller's pace.
import type { ReplyHeader } from '../core/contracts.ts';
import { serverTiming } from './submit.ts';

export const SSE_HEADERS = {
  'content-type': 'text/event-stream; charset=utf-8',
  'cache-control': 'no-cache',
  // A reverse proxy (nginx) would otherwise hold the events back in its buffer.
  'x-accel-buffering': 'no',
};

/** Sent while no event is: keeps proxies and the caller from timing the connection out. */
export const HEARTBEAT = ': keep-alive\n\n';

/**
 * One event. `data` is split at line breaks into `data:` lines (a client joins them again), so
 * nothing in it can end the event early or forge another: chunks are the tenant's text.
 */
export function sseEvent(e: { id?: number; event: string; data: string }): string {
  const id = e.id === undefined ? '' : `id: ${e.id}\n`;
  return `${id}event: ${e.event}\ndata: ${e.data.split(/\r\n|\r|\n/).join('\ndata: ')}\n\n`;
}

/** Whether the caller asks for Server-Sent Events (Accept names text/event-stream, not with q=0). */
export function acceptsEventStream(accept: string | undefined): boolean {
  if (!accept) return false;
  return accept.split(',').some((range) => {
    const [type, ...params] = range.split(';').map((p) => p.trim().toLowerCase());
    return type === 'text/event-stream' && !params.some((p) => /^q\s*=\s*0(\.0*)?$/.test(p));
  });
}

/**
 * A response body of events: `next` gives the text to send when the caller has taken what went
 * before, or null at the end; `gone` runs if the caller leaves first.
 */
export function eventStream(next: () => Promise<string | null>, gone: () => void): ReadableStream<Uint8Array> {
  const encoder = new TextEncoder();
  return new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        const text = await next();
        if (text === null) controller.close();
        else controller.enqueue(encoder.encode(text));
      },
      cancel() {
        gone();
      },
    },
    // Nothing is read ahead of the caller.
    { highWaterMark: 0 },
  );
}

/** A run's answer as one chunk's data: its JSON, or its bytes as `{ contentType, base64 }`. */
export function answerAsChunk(header: ReplyHeader, body: Buffer): string {
  // As an async job's output carries bytes (runtime/user-code/result-body.ts binaryAsJson).
  return header.type === undefined ? body.toString() : JSON.stringify({ contentType: header.type, base64: body.toString('base64') });
}

/**
 * The last event of a run's stream: `done` with its status and timing (the numbers Server-Timing
 * carries, and that header's text), or `error` with its error too.
 */
export function finalEvent(header: ReplyHeader, body: Buffer, totalMs: number): string {
  const timing = { ...header.timing, totalMs: Math.round(totalMs * 100) / 100, ...(header.cold ? { coldMs: header.cold.waitedMs } : {}) };
  const base = { status: header.status, timing, serverTiming: serverTiming(header, totalMs) };
  if (header.status < 400) return sseEvent({ event: 'done', data: JSON.stringify(base) });
  return sseEvent({ event: 'error', data: JSON.stringify({ ...base, error: errorOf(body) }) });
}

/** The `{ code, message }` of an error body (the replica's JSON); one that is not gets a generic one. */
export function errorOf(body: Buffer | string): { code: string; message: string } {
  try {
    const e = (JSON.parse(body.toString()) as { error?: { code?: unknown; message?: unknown } }).error;
    if (typeof e?.code === 'string' && typeof e.message === 'string') return { code: e.code, message: e.message };
  } catch {
    // Not JSON: the generic error below.
  }
  return { code: 'error', message: body.toString().slice(0, 2000) };
}
