// What becomes of the live requests a replica held when it exited (it crashed, was killed, or
// outlived its stop's grace): they go to the function's other replicas and its replacement now,
// not after the lock time; a deleted function's are answered instead. The node agent calls
// `settle` for each replica that exits and `close` when it stops.
import { Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import { errorBody } from '../core/contracts.ts';
import { answerUnrun, JobStore } from '../core/jobs.ts';
import { keys, QUEUE_PREFIX, WEBHOOK_QUEUE } from '../core/keys.ts';
import { dropHeld, handOverLiveEntries, heldBy, leaveLiveGroup } from '../core/live-queue.ts';
import type { Logger } from '../core/log.ts';

/** How often a consumer that still holds entries tries again to leave the live group. */
const LEAVE_RETRY_MS = 5_000;

export interface ExitedRequestsOptions {
  redis: Redis;
  log: Logger;
  /** The node agent's id: it answers a deleted function's requests as this. */
  by: string;
  /** How long a live request stays with the replica that took it. @default 30 s */
  lockMs?: number;
  /** How long finished async jobs are kept. @default 1 day */
  jobRetentionS?: number;
}

export class ExitedRequests {
  /** Hand-overs under way (close waits for them before the agent closes Redis). */
  private readonly pending = new Set<Promise<void>>();
  /** Webhooks of async jobs answered here (answerHeld); made on first use. */
  private webhooks?: Queue;
  private closed = false;

  constructor(private readonly o: ExitedRequestsOptions) {}

  /**
   * Hands what replica `id` of `fn` still held to the function's other replicas (a replica that
   * exits in order holds none; one replaced as stuck handed them over itself, and doing it again
   * changes nothing). Then its consumer leaves the live group once the others have taken what it
   * held (tried every few seconds for two lock times: a consumer that still holds entries is
   * kept, so they stay claimable).
   */
  settle(fn: string, id: string): void {
    const until = Date.now() + 2 * (this.o.lockMs ?? 30_000);
    const leave = async (): Promise<void> => {
      const left = await leaveLiveGroup(this.o.redis, fn, id).catch(() => false);
      if (!left && !this.closed && Date.now() < until) setTimeout(() => void leave(), LEAVE_RETRY_MS).unref();
    };
    const work = this.o.redis
      .sismember(keys.functionIndex, fn)
      // Unknown (Redis unreachable): hand over as usual, which says so if it fails too.
      .catch(() => 1)
      .then((deployed) => (deployed ? this.handOver(fn, id) : this.answerHeld(fn, id)))
      .finally(() => {
        this.pending.delete(work);
        void leave();
      });
    this.pending.add(work);
  }

  /** Waits for the hand-overs under way, then closes the webhook queue. */
  async close(): Promise<void> {
    this.closed = true;
    await Promise.all(this.pending);
    await this.webhooks?.close();
  }

  private handOver(fn: string, id: string): Promise<void> {
    return handOverLiveEntries(this.o.redis, fn, id).then(
      (n) => {
        if (n) this.o.log.warn({ replica: id, requests: n }, 'handed over the live requests of a replica that exited');
      },
      (err: Error) => this.o.log.warn({ replica: id, err: err.message }, 'could not hand over the live requests of a replica that exited; they run again after the lock time'),
    );
  }

  /**
   * What an exited replica of a deleted function held (its stop's grace ran out: the forced
   * delete's requests that were running) would never run again: answered 500 function_deleted
   * here, so an async job ends failed (its webhook called) instead of staying running, and a
   * waiting caller gets an answer before its timeout. Answered first, then removed from the
   * queue: a failure in between leaves them held, and answering twice is harmless (a job is
   * finished once, a gateway takes the first reply).
   */
  private async answerHeld(fn: string, id: string): Promise<void> {
    const { redis, log } = this.o;
    try {
      const held = await heldBy(redis, fn, id);
      if (!held.length) return;
      const body = JSON.stringify(errorBody('function_deleted', `${fn} was deleted while this request ran, and its replica stopped before it finished`));
      this.webhooks ??= new Queue(WEBHOOK_QUEUE, { connection: redis, prefix: QUEUE_PREFIX });
      const answerer = { redis, jobs: new JobStore(redis, this.o.jobRetentionS ?? 86_400), webhooks: this.webhooks, by: this.o.by };
      for (const { data } of held) if (data) await answerUnrun(answerer, data, 500, body, false);
      await dropHeld(redis, fn, id, held.map((h) => h.id));
      log.warn({ replica: id, fn, requests: held.length }, 'answered the requests a replica of a deleted function held when it stopped');
    } catch (err) {
      log.warn({ replica: id, fn, err: (err as Error).message }, 'could not answer the requests a replica of a deleted function held');
    }
  }
}
