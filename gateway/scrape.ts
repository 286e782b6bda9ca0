// Reads the platform's state in Redis when Prometheus scrapes a gateway, in three round trips
// whatever the number of functions, and sets the gauges cluster-gauges.ts computes from it.
import type { Redis } from 'ioredis';
import { keys, liveStream, usageKeys } from '../core/keys.ts';
import { LIVE_GROUP } from '../core/live-queue.ts';
import type { Logger } from '../core/log.ts';
import { lua } from '../core/lua.ts';
import { evalScript } from '../core/redis.ts';
import { BATCH_FIELDS, clusterGauges, type ClusterReading } from './cluster-gauges.ts';
import type { Metrics } from './metrics.ts';

const LIVE_WAITING = lua('live-waiting');

/** A pipeline's replies, or its first error. */
async function replies(pipe: ReturnType<Redis['pipeline']>): Promise<unknown[]> {
  const res = (await pipe.exec()) ?? [];
  const failed = res.find(([err]) => err);
  if (failed) throw failed[0];
  return res.map(([, v]) => v);
}

/** Thrown when Redis did not answer the scrape's first call: embers_redis_up 0. */
class RedisDown extends Error {}

async function readCluster(redis: Redis): Promise<ClusterReading> {
  const [, functions, batchIds, time, usageRecords, oldestUsage] = (await replies(
    redis.pipeline().ping().smembers(keys.functionIndex).smembers(keys.activeBatches).time().xlen(usageKeys.records).xrange(usageKeys.records, '-', '+', 'COUNT', 1),
  ).catch((err: Error) => {
    throw new RedisDown(err.message);
  })) as [string, string[], string[], [string, string], number, [string, string[]][]];
  const nowMs = Number(time[0]) * 1000 + Math.floor(Number(time[1]) / 1000);
  // Sent in one turn, so in one socket write (core/redis.ts): one round trip.
  const members = redis.pipeline();
  for (const fn of functions) members.smembers(keys.replicas(fn));
  for (const id of batchIds) members.hmget(keys.batch(id), ...BATCH_FIELDS);
  const [waiting, listed] = await Promise.all([
    functions.length ? (evalScript(redis, LIVE_WAITING, functions.length, ...functions.map(liveStream), LIVE_GROUP) as Promise<unknown[]>) : [],
    functions.length + batchIds.length ? replies(members) : [],
  ]);
  const replicaIds = listed.slice(0, functions.length) as string[][];
  const ids = replicaIds.flat();
  const records = ids.length ? await redis.mget(ids.map(keys.replica)) : [];
  let at = 0;
  // Ids whose record expired (a replica gone with its node) are skipped; the scheduler prunes them.
  const replicas = replicaIds.map((group) => group.map(() => records[at++]).flatMap((r) => (r ? [JSON.parse(r) as { state?: string }] : [])));
  return { functions, nowMs, waiting, replicas, batches: listed.slice(functions.length) as (string | null)[][], usage: { records: usageRecords, oldestId: oldestUsage[0]?.[0] ?? null } };
}

/** Sets the gauges read from Redis; without Redis, embers_redis_up 0 and none of them. */
export async function refreshClusterGauges(redis: Redis, metrics: Metrics, log: Logger): Promise<void> {
  let reading: ClusterReading | undefined;
  let error: Error | undefined;
  await readCluster(redis).then((r) => (reading = r), (err: Error) => (error = err));
  // Reset after the reads, not before: a scrape beside this one never renders them half set.
  for (const g of [metrics.replicas, metrics.waiting, metrics.oldestWaiting, metrics.batchOutstanding, metrics.batchSinceProgress, metrics.usageBuffer, metrics.usageExportLag]) g.reset();
  if (!reading) {
    const err = error!;
    metrics.redisUp.set(err instanceof RedisDown ? 0 : 1);
    if (!(err instanceof RedisDown)) log.warn({ err: (err as Error).message }, 'could not read the platform\'s state for /metrics');
    return;
  }
  metrics.redisUp.set(1);
  const g = clusterGauges(reading);
  metrics.usageBuffer.set(g.usage.bufferRecords);
  metrics.usageExportLag.set(g.usage.lagSeconds);
  for (const [fn, counts] of g.replicas) for (const [state, n] of Object.entries(counts)) metrics.replicas.set({ function: fn, state }, n);
  for (const [fn, w] of g.waiting) {
    metrics.waiting.set({ function: fn }, w.requests);
    metrics.oldestWaiting.set({ function: fn }, w.oldestSeconds);
  }
  for (const [fn, b] of g.batches) {
    metrics.batchOutstanding.set({ function: fn }, b.outstanding);
    metrics.batchSinceProgress.set({ function: fn }, b.secondsSinceProgress);
  }
}
