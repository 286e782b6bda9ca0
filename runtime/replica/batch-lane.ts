// A replica's batch lane: the BullMQ worker on its function's batch queue, in slots of its own
// (a batch line can never hold a slot a live request needs), and what keeps a line that kills
// replicas from taking others with it: such a line runs alone (runAlone), and a chunk whose
// replica died goes back to the queue a line a job (runChunk).
import { setMaxListeners } from 'node:events';
import { Queue, WaitingError, Worker, type Job } from 'bullmq';
import type { Redis } from 'ioredis';
import { chunkLineJobs, type BatchStore } from '../../core/batches.ts';
import type { BatchChunkData, RunJobData } from '../../core/contracts.ts';
import { batchQueueName, QUEUE_PREFIX } from '../../core/keys.ts';
import type { Logger } from '../../core/log.ts';

/** A request whose replica died this many times is answered 500 instead of run again. */
export const MAX_CRASHES = 2;
/** How long the worker stays at one job at a time after a line that runs alone came (isolate). */
const ISOLATION_MS = 5_000;

export interface BatchLaneOptions {
  redis: Redis;
  /** The function's key. */
  fn: string;
  /** Batch jobs the worker runs at once. */
  concurrency: number;
  lockMs: number;
  batchStore: BatchStore;
  log: Logger;
  /** Runs one line (the replica's invocation); `crashes`: replicas that died holding it before. */
  run: (jobId: string, data: RunJobData, crashes: number, signal?: AbortSignal) => Promise<unknown>;
}

export class BatchLane {
  private worker?: Worker<RunJobData | BatchChunkData>;
  /** Batch jobs (chunks and lines) the worker is in now. */
  private inWorker = 0;
  private jobEnded?: () => void;
  /** A line running alone here (runAlone): other batch jobs step out of the worker meanwhile. */
  private alone?: string;
  /** Batch jobs leaving the worker for a while (stepOut). */
  private steppingOut = 0;
  /** While set, the worker takes one job at a time (isolate). */
  private isolation?: NodeJS.Timeout;
  /** The batch queue, to put back the lines of a chunk whose replica died. */
  private queueHandle?: Queue;

  constructor(private readonly o: BatchLaneOptions) {}

  start(): void {
    const name = batchQueueName(this.o.fn);
    this.worker = new Worker<RunJobData | BatchChunkData>(name, (job, token, signal) => this.runJob(job, token, signal), {
      connection: this.o.redis,
      prefix: QUEUE_PREFIX,
      concurrency: this.o.concurrency,
      lockDuration: this.o.lockMs,
      stalledInterval: Math.max(500, Math.floor(this.o.lockMs / 2)),
      // Poison lines are answered here (the replica's invocation); BullMQ must not fail them silently first.
      maxStalledCount: MAX_CRASHES + 1,
      removeOnComplete: { count: 0 },
      removeOnFail: { count: 100 },
    });
    this.worker.on('error', (err) => this.o.log.error({ err, queue: name }, 'queue worker error'));
  }

  /** Takes no more jobs and waits for those it holds (`force`: without waiting; their locks expire and they run elsewhere). */
  async close(force = false): Promise<void> {
    await (force ? this.worker?.close(true).catch(() => {}) : this.worker?.close());
    clearTimeout(this.isolation);
    await this.queueHandle?.close();
  }

  private async runJob(job: Job<RunJobData | BatchChunkData>, token: string | undefined, signal?: AbortSignal): Promise<void> {
    this.inWorker++;
    try {
      const crashes = 'chunk' in job.data ? 0 : (job.stalledCounter ?? 0);
      const run = () => ('chunk' in job.data ? this.runChunk(job as Job<BatchChunkData>, signal) : this.o.run(job.id!, job.data, crashes, signal).then(() => {}));
      if (crashes > 0 && crashes < MAX_CRASHES) return await this.runAlone(job, token, run);
      if (this.alone !== undefined) return await this.stepOut(job, token, run);
      await run();
    } finally {
      this.inWorker--;
      const ended = this.jobEnded;
      this.jobEnded = undefined;
      ended?.();
    }
  }

  /**
   * Runs a batch line that a replica died holding alone among this replica's batch jobs. A crash
   * ends every job its replica held, so the lines that ran beside a line that kills replicas came
   * back with it, counted as crashed too, and (stalled jobs come back together) ran beside it
   * again: they reached MAX_CRASHES with it and were answered `replica_crashed` without being at
   * fault. Alone, a second crash is the line's own. Such a line turns the worker down to one job
   * at a time (isolate). If other batch jobs are running here it steps out too, to the front of
   * the wait list, rather than wait inside the worker, where a crash would count against it (the
   * next replica with a free slot takes it, and turns down the same way; this one takes it when
   * its running jobs end, if no other did); else it runs, and a job the worker fetched before (or
   * fetches meanwhile) steps out. Live requests still run beside it.
   */
  private async runAlone(job: Job, token: string | undefined, run: () => Promise<void>): Promise<void> {
    this.isolate();
    if (this.alone !== undefined) return this.stepOut(job, token, run);
    this.alone = job.id!;
    try {
      // Jobs the worker fetched before its concurrency dropped enter runJob now (and step out).
      await new Promise((resolve) => setImmediate(resolve));
      if (this.inWorker - this.steppingOut > 1) return await this.stepOut(job, token, run);
      while (this.inWorker > 1) await new Promise<void>((resolve) => (this.jobEnded = resolve));
      this.o.log.warn({ job: job.id, crashes: job.stalledCounter }, 'a replica died holding this batch line: it runs alone');
      await run();
    } finally {
      this.alone = undefined;
    }
  }

  /**
   * Leaves the worker, back to the front of the wait list, without counting an attempt (a batch
   * line runs alone here, or this one must and others run here): another replica, or this one
   * when a job ends, takes it next. If Redis cannot be reached, the job runs now all the same; if
   * the job is no longer this replica's (its lock was lost), it is left alone.
   */
  private async stepOut(job: Job, token: string | undefined, run: () => Promise<void>): Promise<void> {
    this.steppingOut++;
    try {
      await job.moveToWait(token);
    } catch (err) {
      if (typeof (err as { code?: unknown }).code !== 'number') {
        this.o.log.warn({ job: job.id, err: (err as Error).message }, 'could not step out while a batch line runs alone: running it now');
        return run();
      }
    } finally {
      this.steppingOut--;
    }
    throw new WaitingError();
  }

  /** One batch job at a time until ISOLATION_MS after the last line that runs alone came, and none runs alone. */
  private isolate(): void {
    const worker = this.worker!;
    worker.concurrency = 1;
    clearTimeout(this.isolation);
    const end = () => {
      if (this.alone !== undefined) this.isolation = setTimeout(end, ISOLATION_MS).unref();
      else {
        this.isolation = undefined;
        worker.concurrency = this.o.concurrency;
      }
    };
    this.isolation = setTimeout(end, ISOLATION_MS).unref();
  }

  /**
   * A chunk of batch lines: each runs as it would alone (its own slot in the batcher, metered and
   * recorded under its own id), side by side. A chunk whose replica died is not run again as one:
   * its lines without an outcome go back to the queue one a job, so a line that kills replicas
   * is found and answered alone (MAX_CRASHES) instead of taking the chunk's others with it (it
   * costs one crash more than a line queued alone).
   */
  private async runChunk(job: Job<BatchChunkData>, signal?: AbortSignal): Promise<void> {
    const { chunk } = job.data;
    // Lines that have an outcome are not run again (a chunk queued again by a feeder that resumed
    // after its first copy had run and left the queue).
    const done = await this.o.batchStore.haveResults(chunk.batch, chunk.lines.map((l) => l.line));
    const left = chunk.lines.filter((_, i) => !done[i]);
    if ((job.stalledCounter ?? 0) > 0) {
      // A cancelled or finished batch wants no more lines.
      if ((await this.o.batchStore.status(chunk.batch)) !== 'in_progress') return;
      this.o.log.warn({ job: job.id, lines: chunk.lines.length, left: left.length }, 'a replica died holding this chunk of batch lines: its lines go back one a job');
      await this.queue().addBulk(chunkLineJobs(job.data, left));
      return;
    }
    // Each line's handler listens to the chunk's signal: more than Node's default 10 is expected.
    if (signal) setMaxListeners(0, signal);
    const runs = await Promise.allSettled(chunkLineJobs(job.data, left).map(({ data }) => this.o.run(data.rid, data, 0, signal)));
    const failed = runs.find((r) => r.status === 'rejected');
    if (failed) throw failed.reason;
  }

  private queue(): Queue {
    return (this.queueHandle ??= new Queue(batchQueueName(this.o.fn), { connection: this.o.redis, prefix: QUEUE_PREFIX }));
  }
}
