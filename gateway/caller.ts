// Whether a sync caller is still connected, watched through Node's 'close' on its response:
// `c.req.raw.signal` would make an AbortController (an EventTarget) for every run, which costs
// the gateway measurable CPU per request at echo's rates.
import type { ServerResponse } from 'node:http';
import type { Context } from 'hono';

/** A caller's connection: `left` once it closed before its response was written. */
export interface CallerConnection {
  readonly left: boolean;
  /** Calls `fn` once, when the caller leaves; the function returned stops watching. */
  onLeave(fn: () => void): () => void;
}

const CONNECTED: CallerConnection = { left: false, onLeave: () => () => {} };

/** The caller of `c`'s request (always connected when Hono runs without Node's server, as in app.request()). */
export function callerOf(c: Context): CallerConnection {
  const outgoing = (c.env as { outgoing?: ServerResponse } | undefined)?.outgoing;
  if (!outgoing) return CONNECTED;
  const gone = () => (outgoing.destroyed || outgoing.socket?.destroyed === true) && !outgoing.writableFinished;
  return {
    get left() {
      return gone();
    },
    onLeave(fn) {
      const onClose = () => {
        if (!outgoing.writableFinished) fn();
      };
      outgoing.once('close', onClose);
      return () => outgoing.off('close', onClose);
    },
  };
}
