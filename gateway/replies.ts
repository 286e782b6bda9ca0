// Replies come back on one Redis channel per gateway process (not one connection per
// function, and never through BullMQ's events stream, which drops completions once trimmed);
// a replica sends the replies of one tick for this gateway as one message (encodeReplies).
import type { Redis } from 'ioredis';
import { decodeReplies, type ReplyHeader } from '../core/contracts.ts';
import { keys } from '../core/keys.ts';

export interface Reply {
  header: ReplyHeader;
  /** The answer's bytes: JSON, or what a handler's binary() gave (header.type says their Content-Type). */
  body: Buffer;
}

/** A channel some requests here follow: who listens, and its subscription. */
interface Followed {
  listeners: Set<(message: string) => void>;
  subscribed: Promise<void>;
}

export class ReplyHub {
  /** By the request's unique id (RunJobData.id). */
  private readonly waiting = new Map<string, { resolve: (r: Reply | null) => void }>();
  /** Requests that were waiting when the subscription broke: their reply may have been missed. */
  private readonly lost = new Set<string>();
  readonly channel: string;
  private channels: string[] = [];
  private subscribed = false;
  /** Channels of streamed answers some request here reads (gateway/chunk-reader.ts), and their listeners. */
  private readonly followed = new Map<string, Followed>();

  constructor(
    private readonly sub: Redis,
    gatewayId: string,
    private readonly onOther: (channel: string, message: string) => void = () => {},
    /** A message that could not be read (it is dropped). */
    onBadMessage: (channel: string, err: Error) => void = () => {},
  ) {
    this.channel = keys.replyChannel(gatewayId);
    // A reply published while this gateway is not subscribed is lost: know when that can happen,
    // and end the requests waiting now (noReply answers them 503) rather than at their deadline.
    sub.on('close', () => {
      this.subscribed = false;
      for (const [id, waiter] of this.waiting) {
        this.lost.add(id);
        waiter.resolve(null);
      }
      this.waiting.clear();
    });
    sub.on('ready', () => {
      if (this.channels.length) this.subscribe().catch(() => {});
    });
    // As bytes: a reply's body is written out as it came, never decoded (a binary one must not
    // be); ioredis makes strings only for 'message' listeners.
    sub.on('messageBuffer', (channelBytes: Buffer, message: Buffer) => {
      const channel = channelBytes.toString();
      // Thrown here, an error would reach ioredis's socket handler and take the gateway down.
      try {
        const followed = this.followed.get(channel);
        if (followed) {
          for (const listener of followed.listeners) listener(message.toString());
          return;
        }
        if (channel !== this.channel) return this.onOther(channel, message.toString());
        for (const reply of decodeReplies(message)) {
          const id = reply.header.id;
          const waiter = id === undefined ? undefined : this.waiting.get(id);
          if (waiter) {
            this.waiting.delete(id!);
            waiter.resolve(reply);
          }
        }
      } catch (err) {
        onBadMessage(channel, err as Error);
      }
    });
  }

  async start(...otherChannels: string[]): Promise<void> {
    this.channels = [this.channel, ...otherChannels];
    await this.subscribe();
  }

  /**
   * Whether a reply can reach this gateway now. After Redis comes back, replicas may answer
   * before the subscription is restored; a request accepted then would wait for nothing.
   */
  get listening(): boolean {
    return this.subscribed;
  }

  private async subscribe(): Promise<void> {
    await this.sub.subscribe(...this.channels, ...this.followed.keys());
    this.subscribed = true;
  }

  /**
   * Hears the messages of `channel` (a streamed answer's notices) until the function returned is
   * called; resolves once subscribed. A message published before that is missed: read what it
   * announced after subscribing.
   */
  async follow(channel: string, listener: (message: string) => void): Promise<() => void> {
    let f = this.followed.get(channel);
    if (!f) {
      const created: Followed = { listeners: new Set(), subscribed: this.sub.subscribe(channel).then(() => {}) };
      this.followed.set(channel, (f = created));
      created.subscribed.catch(() => {
        if (this.followed.get(channel) === created) this.followed.delete(channel);
      });
    }
    const followed = f;
    followed.listeners.add(listener);
    const unfollow = () => {
      if (!followed.listeners.delete(listener) || followed.listeners.size || this.followed.get(channel) !== followed) return;
      this.followed.delete(channel);
      void this.sub.unsubscribe(channel).catch(() => {});
    };
    try {
      await followed.subscribed;
    } catch (err) {
      unfollow();
      throw err;
    }
    return unfollow;
  }

  /**
   * Registers interest (by the request's unique id, RunJobData.id) before the job is enqueued;
   * resolves null on timeout.
   */
  expect(id: string, timeoutMs: number): Promise<Reply | null> {
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.waiting.delete(id);
        resolve(null);
      }, timeoutMs);
      this.waiting.set(id, {
        resolve: (r) => {
          clearTimeout(timer);
          resolve(r);
        },
      });
    });
  }

  /** Whether `id`'s reply resolved null because the subscription broke (asked once). */
  takeLost(id: string): boolean {
    return this.lost.delete(id);
  }

  cancel(id: string): void {
    this.waiting.get(id)?.resolve(null);
    this.waiting.delete(id);
  }

  get inFlight(): number {
    return this.waiting.size;
  }
}
