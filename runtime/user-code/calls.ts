// A handler's calls to other functions (`ctx.call`, `ctx.stream`), as the user code makes them: it
// asks its replica over the channel and waits for the answer the replica sends back. The replica
// decides everything else (which function the name is, admission, the queue, the deadline,
// metering); this side only numbers the calls, serialises their input and turns the answer into
// a value or a HandlerError.
import { setMaxListeners } from 'node:events';
import { FUNCTION_NAME } from '../../core/contracts.ts';
import { HandlerError, type CallOptions } from '../../sdk/index.ts';
import { MAX_MESSAGES_FRAME } from '../channel/frames.ts';
import type { CallRequest } from '../channel/messages.ts';

/**
 * Most bytes of a call's input, as it is written inside its message: the message travels in one
 * frame of the channel, and a larger frame would be the process breaking its bound.
 */
export const MAX_CALL_INPUT_BYTES = MAX_MESSAGES_FRAME - 4096;

interface Pending {
  n: number;
  resolve: (status: number, body: string) => void;
  /** A streamed call's chunks, as they come. */
  onChunk?: (data: string) => void;
  /** Ends the wait without an answer (the run ended, the caller's signal aborted). */
  fail: (err: Error) => void;
  /** Stops listening to its signals. */
  unlisten?: () => void;
}

export class OutgoingCalls {
  private next = 1;
  private readonly pending = new Map<number, Pending>();

  constructor(
    private readonly o: {
      send: (n: number, call: CallRequest) => void;
      abort: (c: number) => void;
      /** The handler read `k` more of streamed call c's chunks. */
      credit?: (c: number, k: number) => void;
    },
  ) {}

  /** Calls `name` for run `n`; `runSignal` is the calling run's (its end stops the call). */
  call(n: number, name: string, input: unknown, o: CallOptions | undefined, runSignal: AbortSignal): Promise<unknown> {
    return new Promise((resolve, reject) => {
      this.start(n, name, input, o, runSignal, false, {
        resolve: (status, body) => (status >= 200 && status < 300 ? resolve(parse(body)) : reject(callError(name, status, body))),
        fail: reject,
      });
    });
  }

  /** Calls `name` for run `n` and yields the callee's chunks as they come. */
  async *stream(n: number, name: string, input: unknown, o: CallOptions | undefined, runSignal: AbortSignal): AsyncGenerator<unknown> {
    const queue: unknown[] = [];
    let end: { error?: Error } | undefined;
    let wake: (() => void) | undefined;
    const poke = () => {
      const w = wake;
      wake = undefined;
      w?.();
    };
    const c = this.start(n, name, input, o, runSignal, true, {
      onChunk: (data) => {
        queue.push(parse(data));
        poke();
      },
      resolve: (status, body) => {
        end = status >= 200 && status < 300 ? {} : { error: callError(name, status, body) };
        poke();
      },
      fail: (error) => {
        end = { error };
        poke();
      },
    });
    try {
      for (;;) {
        if (queue.length) {
          yield queue.shift();
          this.o.credit?.(c, 1);
          continue;
        }
        if (end) {
          if (end.error) throw end.error;
          return;
        }
        await new Promise<void>((r) => (wake = r));
      }
    } finally {
      // The caller stopped reading early: the callee is stopped.
      const p = this.pending.get(c);
      if (p && this.pending.delete(c)) {
        p.unlisten?.();
        this.o.abort(c);
      }
    }
  }

  /** Call c's answer. */
  result(c: number, status: number, body: string): void {
    const p = this.pending.get(c);
    if (!p) return;
    this.pending.delete(c);
    p.resolve(status, body);
  }

  /** Run n ended: its calls still waiting end with it (its replica stops them). */
  endRun(n: number): void {
    for (const [c, p] of this.pending) {
      if (p.n !== n) continue;
      this.pending.delete(c);
      p.fail(new Error('the calling request ended'));
    }
  }

  /** One of streamed call c's chunks. */
  chunk(c: number, data: string): void {
    this.pending.get(c)?.onChunk?.(data);
  }

  private start(n: number, name: string, input: unknown, o: CallOptions | undefined, runSignal: AbortSignal, stream: boolean, p: Omit<Pending, 'n'>): number {
    const c = this.next++;
    if (typeof name !== 'string' || !FUNCTION_NAME.test(name)) {
      p.fail(new HandlerError(404, `ctx.call: ${JSON.stringify(name)} is not a function name`, 'function_not_found'));
      return c;
    }
    let text: string | undefined;
    try {
      text = JSON.stringify(input ?? null, noBytes);
    } catch (err) {
      p.fail(new TypeError(`ctx.call('${name}'): its input must be JSON (${(err as Error).message})`));
      return c;
    }
    const bytes = Buffer.byteLength(JSON.stringify(text));
    if (bytes > MAX_CALL_INPUT_BYTES) {
      p.fail(new HandlerError(413, `ctx.call('${name}'): its input takes ${bytes} bytes as JSON, over the ${MAX_CALL_INPUT_BYTES} a call carries; pass a file's key in the tenant's bucket instead`, 'call_input_too_large'));
      return c;
    }
    const signals = [runSignal, ...(o?.signal ? [o.signal] : [])];
    const aborted = signals.find((s) => s.aborted);
    if (aborted) {
      p.fail(abortError(name, aborted));
      return c;
    }
    // A pipeline may have many calls waiting on one request's signal.
    setMaxListeners(0, runSignal);
    const stop = (s: AbortSignal) => () => {
      if (!this.pending.delete(c)) return;
      this.o.abort(c);
      p.fail(abortError(name, s));
    };
    const listeners = signals.map((s) => {
      const l = stop(s);
      s.addEventListener('abort', l, { once: true });
      return () => s.removeEventListener('abort', l);
    });
    const unlisten = () => listeners.forEach((off) => off());
    this.pending.set(c, {
      n,
      unlisten,
      onChunk: p.onChunk,
      resolve: (status, body) => {
        unlisten();
        p.resolve(status, body);
      },
      fail: (err) => {
        unlisten();
        p.fail(err);
      },
    });
    const timeoutMs = o?.timeoutMs;
    this.o.send(n, { c, name, input: text, ...(Number.isFinite(timeoutMs) && timeoutMs! > 0 ? { timeoutMs: Math.ceil(timeoutMs!) } : {}), ...(stream ? { stream: true as const } : {}) });
    return c;
  }
}

/** Bytes in a call's input would be written as `{"type":"Buffer","data":[…]}`: a callee reads base64. */
function noBytes(this: unknown, key: string, value: unknown): unknown {
  const original = (this as Record<string, unknown>)[key];
  if (original instanceof Uint8Array || original instanceof ArrayBuffer) throw new TypeError(`bytes${key ? ` at "${key}"` : ''} cannot go into a call as they are; send them as a base64 string`);
  return value;
}

function parse(text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return text;
  }
}

/** A callee's error answer as the HandlerError its caller catches: its status, code and message. */
function callError(name: string, status: number, body: string): HandlerError {
  const e = (parse(body) as { error?: { code?: unknown; message?: unknown } } | undefined)?.error;
  const code = typeof e?.code === 'string' ? e.code : 'call_failed';
  const message = typeof e?.message === 'string' ? e.message : `${name} answered ${status}`;
  return new HandlerError(status, message, code);
}

function abortError(name: string, s: AbortSignal): Error {
  return s.reason instanceof Error ? s.reason : new Error(`ctx.call('${name}') was aborted`);
}
