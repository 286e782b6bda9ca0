// A gateway's reading of function tails (core/tail.ts): one feed per tailed function, however
// many of its callers tail it, each feed a connection of its own blocked in XREAD on the stream.
// While a feed has readers it keeps the function marked tailed (keys.tailing), and it tells the
// replicas when it starts (TAIL_NOW), so they write at once rather than within a second. A feed
// hands each batch to its readers, who filter and hold it at their caller's pace (tail-events.ts).
import type { Redis } from 'ioredis';
import { keys, TAIL_NOW } from '../core/keys.ts';
import type { Logger } from '../core/log.ts';
import { entryOf, TAIL_GATE_TTL_MS } from '../core/tail.ts';
import { ApiError } from './errors.ts';
import type { TailItem } from './tail-filter.ts';

/** A reader of a feed: takes each batch read, and the lines the feed knows were lost before it. */
export interface TailReader {
  push(items: TailItem[], dropped: number): void;
  /** The gateway is closing: end the caller's response. */
  end(): void;
}

/** Readers one gateway serves at once, over all functions: each feed holds a Redis connection. */
export const MAX_TAIL_READERS = 100;
/** Lines one XREAD takes, at most, and how long it blocks (ms) before the feed looks around. */
const READ_COUNT = 500;
const BLOCK_MS = 1_000;

/**
 * Numbers seen per replica: a jump is lines that replica dropped, or that the stream's cap
 * trimmed before this feed read them. Remembers the latest REPLICAS_MAX replicas.
 */
export class SeqGaps {
  private readonly last = new Map<string, number>();

  /**
   * How many lines before `n` of `replica` were never seen. For its first line seen: those since
   * `sessionStart`, the first line it wrote once someone tailed (trimmed before this feed read
   * them), unless `seen` holds what the stream had of it when the feed began.
   */
  gap(replica: string, n: number, sessionStart?: number): number {
    const before = this.last.get(replica);
    this.last.delete(replica);
    this.last.set(replica, Math.max(n, before ?? n));
    if (this.last.size > REPLICAS_MAX) this.last.delete(this.last.keys().next().value as string);
    if (before === undefined) return sessionStart !== undefined && n > sessionStart ? n - sessionStart : 0;
    return n <= before ? 0 : n - before - 1;
  }

  /** A line already in the stream when the feed began: the baseline for that replica, not counted. */
  seen(replica: string, n: number): void {
    this.last.set(replica, Math.max(n, this.last.get(replica) ?? n));
  }
}
const REPLICAS_MAX = 256;

export class TailFeeds {
  private readonly feeds = new Map<string, Feed>();
  private readers = 0;

  constructor(private readonly o: { redis: Redis; log: Logger; maxReaders?: number }) {}

  /** Starts handing `reader` the tail of function `fn` (its key); the function returned stops it. */
  async subscribe(fn: string, reader: TailReader): Promise<() => void> {
    const max = this.o.maxReaders ?? MAX_TAIL_READERS;
    if (this.readers >= max) throw new ApiError(503, 'too_many_tails', `this gateway serves ${max} tails at once (all taken); try again later`);
    this.readers++;
    let feed = this.feeds.get(fn);
    if (!feed) this.feeds.set(fn, (feed = new Feed(this.o.redis, fn, this.o.log)));
    feed.readers.add(reader);
    const f = feed;
    let left = false;
    const leave = () => {
      if (left) return;
      left = true;
      this.readers--;
      f.readers.delete(reader);
      if (f.readers.size === 0 && this.feeds.get(fn) === f) {
        this.feeds.delete(fn);
        f.close();
      }
    };
    try {
      await f.started;
    } catch (err) {
      leave();
      throw new ApiError(503, 'unavailable', `cannot tail now: ${(err as Error).message}`);
    }
    return leave;
  }

  /** Ends every tail (the gateway is closing: a tail would hold its shutdown for its grace period). */
  close(): void {
    for (const f of [...this.feeds.values()]) for (const r of [...f.readers]) r.end();
    for (const f of this.feeds.values()) f.close();
    this.feeds.clear();
  }
}

class Feed {
  readonly readers = new Set<TailReader>();
  readonly started: Promise<void>;
  private readonly conn: Redis;
  private readonly gaps = new SeqGaps();
  private closed = false;
  private markedAt = -Infinity;

  constructor(
    private readonly redis: Redis,
    private readonly fn: string,
    private readonly log: Logger,
  ) {
    this.conn = redis.duplicate();
    this.conn.on('error', () => {});
    this.started = this.start();
    this.started.catch(() => this.close());
  }

  close(): void {
    this.closed = true;
    this.conn.disconnect();
  }

  private async start(): Promise<void> {
    await this.mark();
    await this.redis.publish(keys.cancelChannel, `${this.fn} ${TAIL_NOW}`);
    // From what is there now: a tail shows what happens from here on. What the stream holds
    // already is each replica's baseline for counting what this feed misses.
    const held = await this.redis.xrange(keys.tail(this.fn), '-', '+');
    for (const [, fields] of held) {
      const e = entryOf(fields);
      if (e) this.gaps.seen(e.line.replica, e.n);
    }
    void this.follow(held.at(-1)?.[0] ?? '0-0');
  }

  /** Marks the function tailed for TAIL_GATE_TTL_MS more. */
  private async mark(): Promise<void> {
    this.markedAt = performance.now();
    await this.redis.set(keys.tailing(this.fn), '1', 'PX', TAIL_GATE_TTL_MS);
  }

  private async follow(after: string): Promise<void> {
    const key = keys.tail(this.fn);
    while (!this.closed) {
      try {
        if (performance.now() - this.markedAt >= TAIL_GATE_TTL_MS / 3) await this.mark();
        const res = (await this.conn.xread('COUNT', READ_COUNT, 'BLOCK', BLOCK_MS, 'STREAMS', key, after)) as [string, [string, string[]][]][] | null;
        const entries = res?.[0]?.[1] ?? [];
        if (!entries.length) continue;
        after = entries[entries.length - 1][0];
        const items: TailItem[] = [];
        let dropped = 0;
        for (const [, fields] of entries) {
          const e = entryOf(fields);
          if (!e) continue;
          dropped += this.gaps.gap(e.line.replica, e.n, e.s);
          items.push({ line: e.line, d: e.d });
        }
        for (const r of this.readers) r.push(items, dropped);
      } catch (err) {
        if (this.closed) return;
        // Redis away: try again shortly; its readers see what was trimmed meanwhile as dropped.
        this.log.debug({ fn: this.fn, err: (err as Error).message }, 'tail read failed');
        await new Promise((r) => setTimeout(r, BLOCK_MS));
      }
    }
  }
}
