// A replica that cannot start answers the requests waiting for its function (503, with the phase
// and error) unless another replica of the function is serving, so callers do not hang on a
// version that cannot run.
import { Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import { chunkLineJobs } from '../../core/batches.ts';
import { sinceEnqueued } from '../../core/clock.ts';
import { errorBody, type BatchChunkData, type Manifest, type RunJobData } from '../../core/contracts.ts';
import { batchQueueName, keys, QUEUE_PREFIX } from '../../core/keys.ts';
import { finishLiveEntries, leaveLiveGroup, liveJobId, readLiveEntries, type FinishedEntry, type LiveOutcome } from '../../core/live-queue.ts';
import { decodeLiveJob, hasSpilledPart, type LiveEntry } from '../../core/live-entry.ts';
import { plainName } from '../../core/names.ts';
import type { Delivery } from './delivery.ts';
import { unrunTiming } from '../channel/timing.ts';

export interface Waiting {
  redis: Redis;
  manifest: Manifest;
  /** The replica that failed to start. */
  replica: string;
  delivery: Delivery;
}

export async function answerWaiting(o: Waiting, error: { phase: string; message: string }): Promise<void> {
  const { name, version } = o.manifest;
  const ids = (await o.redis.smembers(keys.replicas(name))).filter((id) => id !== o.replica);
  const others = ids.length ? await o.redis.mget(ids.map(keys.replica)) : [];
  if (others.some((r) => r && (JSON.parse(r) as { state: string }).state === 'ready')) return;
  const failed = (jobId: string, data: RunJobData): Promise<LiveOutcome | undefined> => {
    const body = JSON.stringify(errorBody('replica_start_failed', `${plainName(name)} ${version} cannot start: ${error.phase} failed: ${error.message}`));
    return o.delivery.deliver(jobId, data, { rid: data.rid, status: 503, replica: o.replica, timing: unrunTiming(sinceEnqueued(data)) }, body);
  };
  // Live requests: read them all as this replica, answer, acknowledge.
  for (;;) {
    // A few at a time: an entry may carry megabytes of binary body.
    const entries = await readLiveEntries(o.redis, name, o.replica, 32).catch((): LiveEntry[] => []);
    if (!entries.length) break;
    const finished: FinishedEntry[] = [];
    for (const [entry, fields] of entries) {
      const data = decodeLiveJob(fields);
      finished.push({ id: entry, outcome: data ? await failed(liveJobId(name, entry, data), data) : undefined, spilled: hasSpilledPart(fields) });
    }
    await finishLiveEntries(o.redis, name, finished);
  }
  await leaveLiveGroup(o.redis, name, o.replica).catch(() => {});
  const queue = new Queue<RunJobData | BatchChunkData>(batchQueueName(name), { connection: o.redis, prefix: QUEUE_PREFIX });
  try {
    for (const job of await queue.getJobs(['wait', 'prioritized'], 0, 999)) {
      if (!job?.data) continue;
      const removed = await job.remove().then(() => true, () => false);
      if (!removed) continue;
      if (!('chunk' in job.data)) await failed(job.id!, job.data);
      else for (const { data } of chunkLineJobs(job.data)) await failed(data.rid, data);
    }
  } finally {
    await queue.close();
  }
}

