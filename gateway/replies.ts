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

export class ReplyHub {
  /** By the request's unique id (RunJobData.id). */
  private readonly waiting = new Map<string, { resolve: (r: Reply | null) => void }>();
  readonly channel: string;
  private channels: string[] = [];
  private subscribed = false;

  constructor(
    private readonly sub: Redis,
    gatewayId: string,
    private readonly onOther: (channel: string, message: string) => void = () => {},
    /** A message that could not be read (it is dropped). */
    onBadMessage: (channel: string, err: Error) => void = () => {},
  ) {
    this.channel = keys.replyChannel(gatewayId);
    // A reply published while this gateway is not subscribed is lost: know when that can happen.
    sub.on('close', () => (this.subscribed = false));
    sub.on('ready', () => {
      if (this.channels.length) this.subscribe().catch(() => {});
    });
    // As bytes: a reply's body is written out as it came, never decoded (a binary one must not
    // be); ioredis makes strings only for 'message' listeners.
    sub.on('messageBuffer', (channelBytes: Buffer, message: Buffer) => {
      const channel = channelBytes.toString();
      // Thrown here, an error would reach ioredis's socket handler and take the gateway down.
      try {
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
    await this.sub.subscribe(...this.channels);
    this.subscribed = true;
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

  cancel(id: string): void {
    this.waiting.get(id)?.resolve(null);
    this.waiting.delete(id);
  }

  get inFlight(): number {
    return this.waiting.size;
  }
}
