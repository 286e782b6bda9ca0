// A batch's lines while it is paused for its tenant's budget: those queued that no replica runs
// yet leave its function's queue and wait in Redis (keys.batchHeld), so a pause holds back what
// was queued, not only what was still to be read; resuming queues the same jobs again.
import type { Job, Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import type { BatchChunkData, RunJobData } from '../core/contracts.ts';
import { keys } from '../core/keys.ts';

/** A job as kept while held: what queue.add needs to queue it again under the same id. */
interface HeldJob {
  name: string;
  data: (Partial<RunJobData> & Partial<BatchChunkData>) & { enq?: number };
  opts: Job['opts'];
}

const WAITING = new Set(['waiting', 'prioritized', 'delayed']);

/** Lines a job holds: a chunk's, or one. */
const linesIn = (j: HeldJob) => j.data.chunk?.lines.length ?? 1;

/** The batch's jobs in its function's queue: waiting, delayed or held by a replica. */
export async function batchJobs(queue: Queue, id: string): Promise<Job[]> {
  const ofBatch = (j: Job | undefined): j is Job => {
    const d = j?.data as (Partial<RunJobData> & Partial<BatchChunkData>) | undefined;
    return (d?.batch?.id ?? d?.chunk?.batch) === id;
  };
  return (await queue.getJobs(['waiting', 'prioritized', 'delayed', 'active'])).filter(ofBatch);
}

/**
 * Takes the batch's queued jobs that no replica holds out of `queue`, kept in Redis; the lines
 * they hold. Each is kept before it is removed: a failure in between leaves it both queued and
 * kept, and queuing it again adds nothing while it exists (one job per id).
 */
export async function holdBack(redis: Redis, queue: Queue, id: string): Promise<number> {
  let lines = 0;
  for (const job of await batchJobs(queue, id)) {
    if (!WAITING.has(await job.getState())) continue;
    const held: HeldJob = { name: job.name, data: job.data as HeldJob['data'], opts: job.opts };
    await redis.hset(keys.batchHeld(id), job.id!, JSON.stringify(held));
    // Not removed: a replica took it meanwhile, and runs it.
    if (await queue.remove(job.id!).catch(() => 0)) lines += linesIn(held);
    else await redis.hdel(keys.batchHeld(id), job.id!);
  }
  return lines;
}

/** Queues the batch's held jobs again (their queue time counted from now); the lines they hold. */
export async function queueHeld(redis: Redis, queue: Queue, id: string): Promise<number> {
  const held = Object.values(await redis.hgetall(keys.batchHeld(id))).map((raw) => JSON.parse(raw) as HeldJob);
  const enq = Date.now();
  if (held.length) await queue.addBulk(held.map((j) => ({ name: j.name, data: { ...j.data, enq }, opts: j.opts })));
  await redis.del(keys.batchHeld(id));
  return held.reduce((n, j) => n + linesIn(j), 0);
}
