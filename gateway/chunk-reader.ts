// Reads one request's chunks (core/chunks.ts) for a caller: what is there after the last read,
// or, when nothing is, a wait for the notice its replica publishes as it adds some (followed on
// the gateway's subscriber connection, no connection of its own), or for `poke`. A notice lost
// while Redis reconnects costs a poll's delay, never the chunks. A sync run's reader removes what
// it has passed on (`consume`): the stream's length is then what its caller has not read yet,
// which is what holds its handler back (runtime/replica/chunk-sink.ts).
import type { Redis } from 'ioredis';
import { dropChunks, readChunks, type Chunk } from '../core/chunks.ts';
import { keys } from '../core/keys.ts';
import type { ReplyHub } from './replies.ts';

/** Most chunks one read takes (each at most MAX_CHUNK_BYTES): what a reader holds at once. */
const READ_BATCH = 16;

export class ChunkReader {
  /** The sequence number of the last chunk read. */
  after: number;
  private unfollow?: () => void;
  private wake?: () => void;
  /** A notice (or poke) came since the last read began. */
  private noticed = false;
  private closed = false;

  constructor(
    private readonly o: {
      redis: Redis;
      hub: ReplyHub;
      /** The request's id: the gateway's for a sync run, the job's. */
      id: string;
      /** Read after this sequence number (a reconnecting caller's Last-Event-ID). */
      after?: number;
      consume: boolean;
    },
  ) {
    this.after = o.after ?? 0;
  }

  /** Starts hearing the notices; before the first read, so none is missed. */
  async open(): Promise<void> {
    this.unfollow = await this.o.hub.follow(keys.chunksChannel(this.o.id), () => this.poke());
  }

  /** Ends a wait for chunks now: a notice came, or what the reader waits on besides them changed. */
  poke(): void {
    this.noticed = true;
    const wake = this.wake;
    this.wake = undefined;
    wake?.();
  }

  /** The chunks after those read, READ_BATCH at most. */
  async read(): Promise<Chunk[]> {
    if (this.closed) return [];
    this.noticed = false;
    const chunks = await readChunks(this.o.redis, this.o.id, this.after, READ_BATCH, this.o.consume);
    if (chunks.length) this.after = chunks[chunks.length - 1].seq;
    return chunks;
  }

  /** Until a notice (or poke) came since the last read began, or `ms` passed. */
  async wait(ms: number): Promise<void> {
    if (this.noticed || this.closed) return;
    await new Promise<void>((resolve) => {
      const timer = setTimeout(() => {
        this.wake = undefined;
        resolve();
      }, ms);
      this.wake = () => {
        clearTimeout(timer);
        resolve();
      };
    });
  }

  /** The chunks after those read; none there: waits up to `ms` for a notice, then answers none. */
  async next(ms: number): Promise<Chunk[]> {
    const chunks = await this.read();
    if (!chunks.length) await this.wait(ms);
    return chunks;
  }

  /** Stops hearing notices; a sync run's chunks left are removed (its caller has them, or is gone). */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.unfollow?.();
    this.poke();
    if (this.o.consume) await dropChunks(this.o.redis, this.o.id).catch(() => {});
  }
}
