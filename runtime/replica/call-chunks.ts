// A streamed call's chunks on their way to the calling handler (runtime/replica/calls.ts): read
// from the callee's chunk stream as they come, passed to the user code no faster than its handler
// reads them. Chunks left unread in the stream hold the callee back (its UNREAD_MAX), as a slow
// HTTP reader does.
import type { ChunkReader } from '../../gateway/chunk-reader.ts';

/** Chunks passed to the user code ahead of its credit (call_credit messages), besides one read's worth. */
export const CALL_CHUNK_WINDOW = 16;
/** Chunks the reply counts but that never come (expired with their stream) end the wait after this long. */
const CHUNKS_AFTER_REPLY_MS = 10_000;

/** The call's side of the credit: the user code's `call_credit`s arrive here; `stopped` ends the reading. */
export interface CreditedCall {
  credit: (k: number) => void;
  readonly stopped: boolean;
}

/**
 * Passes chunks to `send` until `through(last)` is told the last one's number and it has passed
 * (or CHUNKS_AFTER_REPLY_MS), or `stop`; at most CALL_CHUNK_WINDOW ahead of the credit.
 */
export function forwardChunks(reader: ChunkReader, call: CreditedCall, send: (data: string) => void): { through: (last: number) => Promise<void>; stop: () => void } {
  let last: number | undefined;
  let ended = false;
  let owed = CALL_CHUNK_WINDOW;
  let wakeCredit: (() => void) | undefined;
  call.credit = (k) => {
    if (!Number.isSafeInteger(k) || k <= 0) return;
    owed = Math.min(CALL_CHUNK_WINDOW, owed + k);
    wakeCredit?.();
  };
  const done = (async () => {
    while (!ended && !call.stopped) {
      if (last !== undefined && reader.after >= last) return;
      if (owed <= 0) {
        await new Promise<void>((r) => {
          wakeCredit = r;
          setTimeout(r, 1_000).unref();
        });
        wakeCredit = undefined;
        continue;
      }
      const chunks = await reader.next(last === undefined ? 1_000 : 50);
      for (const chunk of chunks) send(chunk.data);
      owed -= chunks.length;
    }
  })();
  // A read failing as the replica closes ends the stream; it must not end the process.
  done.catch(() => {});
  return {
    through: async (n) => {
      last = n;
      reader.poke();
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([done, new Promise((r) => (timer = setTimeout(r, CHUNKS_AFTER_REPLY_MS)))]);
      clearTimeout(timer);
      ended = true;
    },
    stop: () => {
      ended = true;
      reader.poke();
      wakeCredit?.();
    },
  };
}
