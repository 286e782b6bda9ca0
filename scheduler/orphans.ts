// Requests held by replicas that died with their node (the machine, or its agent with them): the
// leading scheduler hands them to the function's live replicas once the replica's record has
// expired (three heartbeats) and its node is no longer live, rather than after the lock time, and
// removes the dead consumers from the group. A replica whose agent is alive is its agent's to
// hand over (it sees the exit at once); one whose heartbeats merely stalled keeps what it holds.
import type { Redis } from 'ioredis';
import { handOverLiveEntries, leaveLiveGroup, LIVE_GROUP } from '../core/live-queue.ts';
import { keys, liveStream } from '../core/keys.ts';

export interface Orphaned {
  consumer: string;
  /** Requests it held, now claimable by the function's other replicas. */
  handedOver: number;
  /** Whether it left the group (it held nothing any more). */
  removed: boolean;
}

/** Hands over what `fn`'s consumers on dead nodes held and removes them; resolves with what it did. */
export async function rescueOrphans(redis: Redis, fn: string, liveNodes: ReadonlySet<string>): Promise<Orphaned[]> {
  let consumers: { name: string; pending: number }[];
  try {
    consumers = ((await redis.xinfo('CONSUMERS', liveStream(fn), LIVE_GROUP)) as unknown[][]).map(fields);
  } catch {
    // No stream or group yet: nobody holds anything.
    return [];
  }
  if (consumers.length === 0) return [];
  const alive = await redis.pipeline(consumers.map((c) => ['exists', keys.replica(c.name)])).exec();
  const nodes = await redis.hmget(keys.replicaNodes, ...consumers.map((c) => c.name));
  const out: Orphaned[] = [];
  for (const [i, c] of consumers.entries()) {
    const [err, exists] = alive?.[i] ?? [null, 1];
    if (err || exists) continue;
    // Its node is alive: its agent hands over what an exited replica held, and a replica whose
    // record lapsed while it runs (a Redis blip) must not have its requests run twice.
    const node = nodes[i];
    if (node && liveNodes.has(node)) continue;
    const handedOver = c.pending > 0 ? await handOverLiveEntries(redis, fn, c.name) : 0;
    // It leaves the group only once nothing is left pending there (leaveLiveGroup).
    const removed = await leaveLiveGroup(redis, fn, c.name);
    if (removed) await redis.hdel(keys.replicaNodes, c.name);
    out.push({ consumer: c.name, handedOver, removed });
  }
  return out;
}

/** XINFO CONSUMERS' flat [name, n, pending, n, …] as an object. */
function fields(row: unknown[]): { name: string; pending: number } {
  const o: Record<string, unknown> = {};
  for (let i = 0; i + 1 < row.length; i += 2) o[String(row[i])] = row[i + 1];
  return { name: String(o.name), pending: Number(o.pending) || 0 };
}
