// The live lane: a function's synchronous and async requests ride one Redis stream, read by its
// replicas through one consumer group. Against a BullMQ job (five Lua scripts and five event
// stream entries per job, measured ~210 µs of Redis CPU per request), a request costs one XADD,
// its share of one XREADGROUP that hands a replica up to as many requests as it has free slots,
// and its share of one XACK + XDEL. The group's pending list is the crash safety: an entry a
// replica read but never acknowledged is claimed by another once it has been idle for the lock
// time, and its delivery count tells how often that happened (runtime/live-consumer.ts).
// Acknowledged entries are deleted, so the stream's length is what waits plus what runs, and
// its length less the group's pending count is what waits.
import type { Redis } from 'ioredis';
import type { RunJobData } from './contracts.ts';

/** The stream of a function's live requests. */
export const liveStream = (fn: string) => `embers:stream:${fn}`;
/** Every replica of the function reads as one consumer of this group. */
export const LIVE_GROUP = 'replicas';

/** Creates the group (reading from the stream's start, so nothing added before is skipped); no-op when it exists. */
export async function ensureLiveGroup(redis: Redis, fn: string): Promise<void> {
  try {
    await redis.xgroup('CREATE', liveStream(fn), LIVE_GROUP, '0', 'MKSTREAM');
  } catch (err) {
    if (!String((err as Error).message).startsWith('BUSYGROUP')) throw err;
  }
}

/**
 * Removes a replica's consumer from the group, unless it still holds entries: deleting a consumer
 * drops its pending entries, and those must stay claimable by the other replicas.
 */
export async function leaveLiveGroup(redis: Redis, fn: string, consumer: string): Promise<void> {
  const held = (await redis.xpending(liveStream(fn), LIVE_GROUP, '-', '+', 1, consumer)) as unknown[];
  if (held.length === 0) await redis.xgroup('DELCONSUMER', liveStream(fn), LIVE_GROUP, consumer);
}

/** Acknowledges finished entries and deletes them, in one round trip. */
export async function ackLiveEntries(redis: Redis, fn: string, ids: string[]): Promise<void> {
  await redis.multi().xack(liveStream(fn), LIVE_GROUP, ...ids).xdel(liveStream(fn), ...ids).exec();
}

/** Stream entries carry one field, `d`: the job data as JSON. */
const encodeLiveJob = (data: RunJobData): string => JSON.stringify(data);
export const decodeLiveJob = (fields: string[]): RunJobData | undefined => {
  const i = fields.indexOf('d');
  return i >= 0 ? (JSON.parse(fields[i + 1]) as RunJobData) : undefined;
};

/** The gateway's side: enqueue, take back a request nobody started, and read the depth. */
export class LiveQueue {
  private readonly grouped = new Set<string>();

  constructor(private readonly redis: Redis) {}

  /** Queues the request; returns its entry id (for `remove`). */
  async add(fn: string, data: RunJobData): Promise<string> {
    if (!this.grouped.has(fn)) {
      await ensureLiveGroup(this.redis, fn);
      this.grouped.add(fn);
    }
    return (await this.redis.xadd(liveStream(fn), '*', 'd', encodeLiveJob(data))) as string;
  }

  /** Deletes the entry: a replica that has not read it never will; one that has, finishes it anyway. */
  async remove(fn: string, entry: string): Promise<void> {
    await this.redis.xdel(liveStream(fn), entry);
  }

  /** Requests no replica has taken yet: the stream's entries less those a replica holds. */
  async waiting(fn: string): Promise<number> {
    const res = await this.redis.multi().xlen(liveStream(fn)).xpending(liveStream(fn), LIVE_GROUP).exec();
    const [length, pending] = [res?.[0]?.[1] as number | undefined, res?.[1]?.[1] as [number] | undefined];
    // No group yet (nothing was ever queued) answers an error for XPENDING: nobody holds anything.
    return Math.max(0, (length ?? 0) - (typeof pending?.[0] === 'number' ? pending[0] : 0));
  }
}
