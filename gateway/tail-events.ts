// GET /v1/functions/:name/tail: a function's tail as Server-Sent Events, from now on, until the
// caller leaves. `tailing` first (the tail is live), then `log` and `request` lines as its
// replicas write them, filtered here, and `dropped` with a count wherever lines were lost: to the
// stream's caps, to a replica's or its user code's bounds, or to this caller reading slower than
// the function logs (its backlog keeps the newest READER_BACKLOG lines).
import type { Context } from 'hono';
import { callerOf } from './caller.ts';
import type { GatewayDeps, GatewayEnv } from './deps.ts';
import { eventStream, HEARTBEAT, SSE_HEADERS, sseEvent } from './sse.ts';
import { TailBacklog, TailFilter, type TailFilterSpec } from './tail-filter.ts';

/** Lines one caller may be behind by; older ones are skipped and counted. */
export const READER_BACKLOG = 1_000;
/** Lines sent per write, at most. */
const SEND_BATCH = 100;
/** A heartbeat comment goes out after this long without an event. */
const HEARTBEAT_MS = 15_000;

export async function tailEvents(c: Context<GatewayEnv>, deps: GatewayDeps, fn: { key: string; name: string }, spec: TailFilterSpec): Promise<Response> {
  const filter = new TailFilter(spec);
  const backlog = new TailBacklog(READER_BACKLOG);
  let wake: (() => void) | undefined;
  const leave = await deps.tails.subscribe(fn.key, {
    push(items, dropped) {
      const taken = filter.take(items);
      backlog.push(taken.show, dropped + taken.dropped);
      if (!backlog.empty) wake?.();
    },
    end: () => close(),
  });
  let finished = false;
  const close = () => {
    if (finished) return;
    finished = true;
    leave();
    wake?.();
  };
  const caller = callerOf(c);
  caller.onLeave(close);
  // Gone while the feed started: nothing would tell it to stop.
  if (caller.left) close();
  let first = true;
  const next = async (): Promise<string | null> => {
    if (first) {
      first = false;
      return sseEvent({ event: 'tailing', data: JSON.stringify({ function: fn.name, ...spec }) });
    }
    while (!finished) {
      if (!backlog.empty) {
        const { items, dropped } = backlog.take(SEND_BATCH);
        const lost = dropped ? sseEvent({ event: 'dropped', data: JSON.stringify({ count: dropped }) }) : '';
        return lost + items.map((i) => sseEvent({ event: i.line.type, data: i.d })).join('');
      }
      const woke = await new Promise<boolean>((resolve) => {
        const timer = setTimeout(() => resolve(false), HEARTBEAT_MS);
        wake = () => {
          clearTimeout(timer);
          resolve(true);
        };
      });
      wake = undefined;
      if (!woke && !finished) return HEARTBEAT;
    }
    return null;
  };
  return c.body(eventStream(next, close), 200, SSE_HEADERS);
}
