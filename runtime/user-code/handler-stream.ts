// A handler that yields, in the user-code process: an async generator, or any async iterable it
// returns; each value it yields is a chunk (its JSON: chunkJson). A run that streams to its caller
// or its job (RunMessage.streamTo) sends each chunk to the replica as it comes, never more than
// SEND_WINDOW ahead of the replica's credit: past that the generator is not pulled, so a slow
// reader pauses the handler instead of filling memory anywhere. A run for a job, and every run
// that does not stream, gathers the chunks into a JSON array within the answer bound: what the run
// answers, as if the handler had returned the array.
import { MAX_CHUNK_BYTES, SEND_WINDOW } from '../../core/chunk-limits.ts';
import { AnswerTooLargeError, chunkJson } from './result-body.ts';
import type { RunMessage } from '../channel/messages.ts';

/** What a run whose handler yielded answers: its chunks gathered (a JSON array's text), or nothing when they were only sent. */
export class StreamedAnswer {
  constructor(
    readonly json: string | undefined,
    readonly count: number,
  ) {}
}

/** Whether a handler's result is chunks to pull (an async generator, a ReadableStream, any async iterable). */
export function isChunkSource(value: unknown): value is AsyncIterable<unknown> {
  return typeof value === 'object' && value !== null && typeof (value as Record<symbol, unknown>)[Symbol.asyncIterator] === 'function';
}

interface Sending {
  /** Chunks sent that the replica has not credited yet. */
  unacked: number;
  wake?: () => void;
}

export class HandlerStreams {
  /** Runs sending chunks now, by their number on the channel. */
  private readonly sending = new Map<number, Sending>();

  constructor(
    private readonly send: (n: number, data: string) => void,
    /** Run n's generator is about to run (watchdog.ts). */
    private readonly markRun: (n: number) => void = () => {},
  ) {}

  /** The replica took `k` more of run `n`'s chunks off its hands. */
  credit(n: number, k: number): void {
    const s = this.sending.get(n);
    if (!s || !(k > 0)) return;
    s.unacked = Math.max(0, s.unacked - k);
    s.wake?.();
  }

  /**
   * Pulls `source` until it ends or `signal` aborts (a timeout, a cancel, the caller gone): then
   * the generator is told to return (its `finally` runs), without waiting for it.
   */
  async drain(source: AsyncIterable<unknown>, m: Pick<RunMessage, 'n' | 'streamTo'>, signal: AbortSignal, maxAnswerBytes: number): Promise<StreamedAnswer> {
    const sends = m.streamTo !== undefined;
    const gathers = m.streamTo !== 'caller';
    const state: Sending = { unacked: 0 };
    if (sends) this.sending.set(m.n, state);
    const parts: string[] = [];
    let bytes = 2;
    let count = 0;
    let ended = false;
    const it = source[Symbol.asyncIterator]();
    try {
      for (;;) {
        this.markRun(m.n);
        const next = await untilAborted(it.next(), signal);
        if (next.done) {
          ended = true;
          break;
        }
        const json = chunkJson(next.value, MAX_CHUNK_BYTES);
        count++;
        if (gathers) {
          bytes += Buffer.byteLength(json) + (parts.length ? 1 : 0);
          if (bytes > maxAnswerBytes) throw new AnswerTooLargeError(bytes, maxAnswerBytes);
          parts.push(json);
        }
        if (!sends) continue;
        this.send(m.n, json);
        state.unacked++;
        while (state.unacked >= SEND_WINDOW) await untilAborted(new Promise<void>((resolve) => (state.wake = resolve)), signal);
      }
    } finally {
      this.sending.delete(m.n);
      // Not awaited: a generator stuck in an await would hold the run's answer.
      if (!ended) void Promise.resolve().then(() => it.return?.()).catch(() => {});
    }
    return new StreamedAnswer(gathers ? `[${parts.join(',')}]` : undefined, count);
  }
}

/** `p`, or a rejection with the signal's reason once it aborts. */
function untilAborted<T>(p: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(signal.reason as Error);
  return new Promise<T>((resolve, reject) => {
    const abort = () => reject(signal.reason as Error);
    signal.addEventListener('abort', abort, { once: true });
    p.then(
      (v) => {
        signal.removeEventListener('abort', abort);
        resolve(v);
      },
      (err: unknown) => {
        signal.removeEventListener('abort', abort);
        reject(err as Error);
      },
    );
  });
}
