// The replicas a function has, as their heartbeats describe them: read by GET /v1/functions/:name
// (/metrics reads every function's at once: scrape.ts).
import type { Redis } from 'ioredis';
import { keys } from '../core/keys.ts';

/** Live replicas from their heartbeat records; ids whose record expired are pruned. */
export async function replicasOf(redis: Redis, name: string): Promise<unknown[]> {
  const ids = await redis.smembers(keys.replicas(name));
  if (ids.length === 0) return [];
  const records = await redis.mget(ids.map(keys.replica));
  const gone = ids.filter((_, i) => records[i] === null);
  if (gone.length) await redis.srem(keys.replicas(name), ...gone);
  return records.filter((r): r is string => r !== null).map((r) => JSON.parse(r));
}
