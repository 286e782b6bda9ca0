// The replica's side of a run that streams. It takes the chunks the user code sends (untrusted:
// each must be JSON text within MAX_CHUNK_BYTES, never more than SEND_WINDOW ahead of the credit
// given), writes them to the run's chunk stream as they come (one call per burst: core/chunks.ts),
// and gives the credit back once they are written, unless the gateway of a sync caller has
// UNREAD_MAX of them unread: then it looks again every PAUSED_POLL_MS, and the handler stays
// paused (handler-stream.ts) while its caller reads slowly. It never holds more than the window.
import { MAX_CHUNK_BYTES, SEND_WINDOW, UNREAD_MAX } from '../../core/chunks.ts';

/** How often a paused run looks whether its caller has read on. */
const PAUSED_POLL_MS = 50;

export interface ChunkSinkOptions {
  /** An async job's chunks are kept, with no reader to wait for; a sync caller's are read and removed by its gateway. */
  kept: boolean;
  /** Writes chunks in order: the last one's sequence number, and the stream's length (for a sync caller, what is unread). */
  write(data: string[]): Promise<{ last: number; length: number }>;
  /** The chunks a sync caller's gateway has not read yet. */
  unread(): Promise<number>;
  /** Lets the user code send `k` more. */
  credit(k: number): void;
  /** The run must stop: its user code broke the rules (`invalid_answer`) or its chunks could not be written (`stream_failed`). */
  fail(code: 'invalid_answer' | 'stream_failed', why: string): void;
}

export class ChunkSink {
  /** The last chunk's sequence number, the chunks written and their bytes. */
  last = 0;
  count = 0;
  bytes = 0;
  failure?: { code: 'invalid_answer' | 'stream_failed'; why: string };
  private queued: string[] = [];
  /** Taken and not credited yet, and of those the written ones whose credit is held back. */
  private unacked = 0;
  private held = 0;
  private writing: Promise<void> = Promise.resolve();
  private poll?: NodeJS.Timeout;
  private closed = false;

  constructor(private readonly o: ChunkSinkOptions) {}

  /** A chunk from the user code (as it came over IPC). */
  readonly take = (data: unknown): void => {
    if (this.failure || this.closed) return;
    if (typeof data !== 'string' || data.length === 0 || data.length > MAX_CHUNK_BYTES) return this.refuse('invalid_answer', `it sent a chunk that is not JSON text of at most ${MAX_CHUNK_BYTES} bytes`);
    if (++this.unacked > SEND_WINDOW) return this.refuse('invalid_answer', `it sent more than ${SEND_WINDOW} chunks ahead of the replica's credit`);
    // The chunks of one IPC message arrive in one turn: written in one call.
    if (this.queued.push(data) === 1) this.writing = this.writing.then(() => this.flush());
  };

  /** Waits for what is being written; takes nothing more. */
  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.poll);
    this.poll = undefined;
    await this.writing;
  }

  private async flush(): Promise<void> {
    const batch = this.queued;
    this.queued = [];
    if (!batch.length || this.failure) return;
    try {
      const { last, length } = await this.o.write(batch);
      this.last = last;
      this.count += batch.length;
      for (const b of batch) this.bytes += Buffer.byteLength(b);
      this.held += batch.length;
      this.release(length);
    } catch (err) {
      this.refuse('stream_failed', `its chunks could not be written (${(err as Error).message})`);
    }
  }

  /** Gives back the credit held, unless the caller has UNREAD_MAX chunks unread: then looks again later. */
  private release(unread: number): void {
    if (this.closed || this.failure) return;
    if (this.o.kept || unread < UNREAD_MAX) {
      if (!this.held) return;
      const k = this.held;
      this.held = 0;
      this.unacked -= k;
      this.o.credit(k);
      return;
    }
    this.poll ??= setTimeout(() => {
      this.poll = undefined;
      void this.o.unread().then(
        (n) => this.release(n),
        () => this.release(unread),
      );
    }, PAUSED_POLL_MS);
  }

  private refuse(code: 'invalid_answer' | 'stream_failed', why: string): void {
    if (this.failure) return;
    this.failure = { code, why };
    this.queued = [];
    clearTimeout(this.poll);
    this.o.fail(code, why);
  }
}
