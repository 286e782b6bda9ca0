// The batch feeder: while its scheduler leads, it walks every unfinished batch through
// validating → in_progress → finalizing → completed (or cancelling → cancelled, or failed).
// It feeds lines into the function's batch queue (below live traffic) with a bounded number
// outstanding, so a 100k-line batch never floods Redis. Every step resumes from Redis state.
import { createInterface } from 'node:readline';
import type { Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import { BATCH_TERMINAL, BatchStore, chunkJob, chunkOf, errorLine, lineJob, type BatchRecord, type BatchStatus } from '../core/batches.ts';
import { s3Keys, type BatchChunkLine } from '../core/contracts.ts';
import type { TenantStores } from '../core/buckets.ts';
import { BudgetStore } from '../core/budgets.ts';
import type { Logger } from '../core/log.ts';
import type { Registry } from '../core/registry.ts';
import { DEFAULT_TENANT, plainName } from '../core/names.ts';
import { statusOf, type ObjectStore } from '../core/s3.ts';
import { compileInputSchema, describeErrors } from '../core/validate.ts';
import { keys } from '../core/keys.ts';
import { chunkLines, DECIDE_SPAN_MS, FEED_LINES, nextLookMs, Pace, POLL_MS } from './batch-pace.ts';
import { parseLine, splitUnwritable, type FeedJob } from './batch-lines.ts';
import { batchJobs, holdBack, queueHeld } from './batch-hold.ts';

export interface BatchFeederOptions {
  redis: Redis;
  /** The platform's bucket: outputs and errors files. */
  store: ObjectStore;
  /** Where a batch's input is read: the platform's bucket or one its tenant registered. */
  inputs: TenantStores;
  registry: Registry;
  log: Logger;
  /** Lines of one batch in its function's queue at once. */
  maxOutstanding: number;
  /** Most arrays and objects a line's input may nest (EMBERS_MAX_JSON_DEPTH); a deeper line fails alone. */
  maxJsonDepth: number;
  /** Work was queued for a function: decide its scale now. */
  wake(fn: string): void;
  /** The function's queue (the scheduler's, shared). */
  queue(fn: string): Queue;
}

/**
 * A tenant's input schema runs here, in the leading scheduler (beside a gateway under `npm
 * start`): a batch's lines are checked against it for this long at most, then passed on unchecked
 * (the replicas check every line with the function's zod): a batch of large lines, each within
 * the gateway's budget (core/validate.ts), would otherwise hold the scheduler, and the gateway
 * beside it, for many seconds.
 */
const CHECK_MS = 2_000;
/** How often a batch paused for its tenant's budget looks again. */
const BUDGET_LOOK_MS = 2_000;
/** The validation loop lets other work run (a gateway's requests) after this long without a pause. */
const YIELD_MS = 20;

/** A batch moved on (cancel asked, leadership lost, paused for its budget): the current step stops and the loop re-reads it. */
class Interrupted extends Error {}
/** The batch's input cannot be read any more (its bucket unregistered, or refusing its credentials): the batch fails. */
class InputGone extends Error {}

export class BatchFeeder {
  private readonly batches: BatchStore;
  private readonly budgets: BudgetStore;
  private readonly loops = new Map<string, Promise<void>>();
  private leading = false;
  private closed = false;
  private readonly log: Logger;

  constructor(private readonly o: BatchFeederOptions) {
    this.batches = new BatchStore(o.redis);
    this.budgets = new BudgetStore(o.redis);
    this.log = o.log.child({ component: 'batch-feeder' });
  }

  /** Called on every scheduler pass: starts a loop for each unfinished batch while leading. */
  async sync(leading: boolean): Promise<void> {
    this.leading = leading && !this.closed;
    if (!this.leading) return;
    for (const id of await this.batches.active()) {
      if (this.loops.has(id)) continue;
      this.loops.set(
        id,
        this.run(id).finally(() => this.loops.delete(id)),
      );
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    this.leading = false;
    await Promise.allSettled([...this.loops.values()]);
  }

  private async run(id: string): Promise<void> {
    const log = this.log.child({ batch: id });
    try {
      while (this.leading) {
        const rec = await this.batches.record(id);
        if (!rec || BATCH_TERMINAL.includes(rec.status)) {
          await this.batches.retire(id);
          return;
        }
        try {
          if (rec.status === 'validating') await this.validate(rec, log);
          else if (rec.status === 'in_progress') await this.feed(rec, log);
          else if (rec.status === 'cancelling') await this.stop(rec, 'cancelled');
          else if (rec.status === 'finalizing') await this.finalize(rec, 'completed');
        } catch (err) {
          // An input deleted under the batch (its file, DELETE /v1/files/:id) never comes back.
          if (statusOf(err) === 404 && (rec.status === 'validating' || rec.status === 'in_progress')) await this.fail(rec, `its input ${rec.inputUri} no longer exists`);
          else if (err instanceof InputGone && (rec.status === 'validating' || rec.status === 'in_progress')) await this.fail(rec, err.message);
          else if (!(err instanceof Interrupted)) throw err;
        }
      }
    } catch (err) {
      // Redis or S3 trouble: the loop ends and the next scheduler pass starts it again from state.
      log.warn({ err: (err as Error).message }, 'batch step failed; retrying on the next pass');
      await sleep(1_000);
    }
  }

  /** Counts the lines and records each bad one (bad JSON, no custom_id, input the schema refuses). */
  private async validate(rec: BatchRecord, log: Logger): Promise<void> {
    const manifest = await this.o.registry.active(rec.function);
    if (!manifest) return this.fail(rec, `function ${plainName(rec.function)} no longer exists`);
    const valid = compileInputSchema(manifest.inputSchema);
    const seen = new Set<string>();
    let total = 0;
    let bad = 0;
    let checkMs = 0;
    let ranSince = performance.now();
    for await (const { line, text } of await this.lines(rec)) {
      if (line % 1000 === 0) await this.check(rec.id, ['validating']);
      // Lines come from a chunk in microtasks: without a pause here, I/O waits for a whole chunk.
      if (performance.now() - ranSince > YIELD_MS) {
        await new Promise((r) => setImmediate(r));
        ranSince = performance.now();
      }
      total++;
      const item = parseLine(text, this.o.maxJsonDepth);
      let error: { code: string; message: string } | undefined;
      let cid: string | null = null;
      if ('error' in item) {
        error = item.error;
        cid = item.cid ?? null;
      } else {
        cid = item.cid;
        if (seen.has(cid)) error = { code: 'duplicate_custom_id', message: `custom_id "${cid}" appears on an earlier line; each must be unique` };
        else if (checkMs < CHECK_MS) {
          const t0 = performance.now();
          const ok = valid(item.input);
          checkMs += performance.now() - t0;
          if (!ok) error = { code: 'invalid_input', message: `input does not match the schema of ${plainName(rec.function)}: ${describeErrors(valid)}` };
        }
        seen.add(cid);
      }
      if (error) {
        bad++;
        await this.batches.lineDone(rec.id, line, false, errorLine(cid, line, error), true);
      }
    }
    if (total === 0) return this.fail(rec, 'the input file has no lines; each line must be {"custom_id": "…", "input": {…}}');
    log.info({ total, invalid: bad, ...(checkMs >= CHECK_MS ? { checkedFor: Math.round(checkMs) } : {}) }, 'batch validated');
    await this.batches.transition(rec.id, ['validating'], { status: 'in_progress', total, inProgressAt: new Date().toISOString() });
  }

  /**
   * Queues the valid lines not yet queued, keeping at most maxOutstanding in the queue: one line
   * a job until the rate lines finish at is known, then in chunks when they finish fast (chunkLines).
   */
  private async feed(rec: BatchRecord, log: Logger): Promise<void> {
    // Paused (or lines left to queue, and maybe now paused): the input is not opened, nor held
    // open, until the budget allows lines again.
    if ((rec.paused || rec.fed + rec.invalid < rec.total) && (await this.pausedForBudget(rec, log))) return void (await sleep(BUDGET_LOOK_MS));
    const queue = this.o.queue(rec.function);
    const done = await this.batches.doneLines(rec.id);
    const meta = { enq: 0, t: rec.tenant, k: rec.key };
    let jobs: FeedJob[] = [];
    let lines = 0;
    // The chunk being filled: queued once a line beyond it comes, so it is never split across two addBulks.
    let open: { first: number; lines: BatchChunkLine[] } | undefined;
    let cursor = rec.cursor;
    const pace = new Pace();
    // A window smaller than an addBulk gets what fits (a chunk is at most a quarter of it).
    const feedLines = Math.min(FEED_LINES, this.o.maxOutstanding);
    const closeChunk = () => {
      if (!open) return;
      jobs.push(chunkJob(rec.id, open.first, open.lines, meta));
      open = undefined;
    };
    const flush = async () => {
      closeChunk();
      if (jobs.length === 0) return;
      await this.waitForRoom(rec.id, lines, pace, log);
      const perMs = pace.perMs(DECIDE_SPAN_MS);
      const enq = Date.now();
      for (const j of jobs) j.data.enq = enq;
      const unqueued = await this.addOrFailAlone(rec.id, queue, jobs);
      const tx = this.o.redis.multi().hset(keys.batch(rec.id), 'cursor', cursor).hincrby(keys.batch(rec.id), 'fed', lines - unqueued);
      const size = perMs ? chunkLines(perMs, this.o.maxOutstanding) : 0;
      // Only up, and by a factor of 2 or more, so the size does not follow the rate's noise (a
      // chunk's lines are each held back by live traffic on their own; a big chunk of a batch
      // that slowed down costs only how its lines spread over replicas).
      if (perMs && size >= 2 * Math.max(rec.chunkSize, 1)) {
        // Changed with the cursor the new size starts after, in one transaction: every line
        // before it is queued, so a feeder resuming from the cursor cuts the same chunks.
        rec.chunkSize = size;
        rec.chunkFrom = cursor + 1;
        tx.hset(keys.batch(rec.id), { chunkSize: size, chunkFrom: rec.chunkFrom });
        log.info({ linesPerSecond: Math.round(perMs * 1000), chunkSize: size, from: rec.chunkFrom }, 'batch lines queued in chunks of a new size from here');
      }
      await tx.exec();
      this.o.wake(rec.function);
      jobs = [];
      lines = 0;
    };
    for await (const { line, text } of await this.lines(rec)) {
      if (line <= rec.cursor || done.has(line)) continue;
      const item = parseLine(text, this.o.maxJsonDepth);
      if ('error' in item) continue; // recorded while validating
      let first = chunkOf(line, rec);
      if (open && open.first !== first) {
        closeChunk();
        if (lines >= feedLines) {
          await flush();
          // The flush may have changed the chunk size, from this line on.
          first = chunkOf(line, rec);
        }
      }
      const l = { line, cid: item.cid, input: item.input, bin: Buffer.byteLength(text) };
      lines++;
      cursor = line;
      if (first !== undefined) (open ??= { first, lines: [] }).lines.push(l);
      else {
        jobs.push(lineJob(rec.id, l, meta));
        if (lines >= feedLines) await flush();
      }
    }
    await flush();
    log.debug('batch fully queued');
    // Everything is queued: wait for the last lines, then write the files.
    for (let i = 0; ; i++) {
      const r = await this.check(rec.id, ['in_progress']);
      if (r.completed + r.failed >= r.total) break;
      if (i % 50 === 49 && !(await this.o.registry.active(rec.function))) return this.fail(r, `function ${plainName(rec.function)} was deleted while the batch ran`);
      // Every second, the budget: its queued lines are held back the moment it is reached.
      if (i % 5 === 4 && (await this.pausedForBudget(r, log))) throw new Interrupted();
      await sleep(POLL_MS * 2);
    }
    await this.batches.transition(rec.id, ['in_progress'], { status: 'finalizing', finalizingAt: new Date().toISOString() });
  }

  /**
   * Queues the jobs. When BullMQ refuses them and some lines' inputs cannot be written as JSON,
   * those lines fail alone (errors file, with their line numbers; never queued, so never fed) and
   * the rest are queued; any other failure (Redis) is thrown, and the feed resumes from the cursor.
   * Returns how many lines failed here.
   */
  private async addOrFailAlone(batch: string, queue: Queue, jobs: FeedJob[]): Promise<number> {
    try {
      await queue.addBulk(jobs);
      return 0;
    } catch (err) {
      const { queueable, unwritable } = splitUnwritable(jobs);
      if (unwritable.length === 0) throw err;
      for (const { line, cid, reason } of unwritable) {
        const error = { code: 'not_queued', message: `line could not be queued: its input cannot be written as JSON (${reason})` };
        await this.batches.lineDone(batch, line, false, errorLine(cid, line, error), true);
      }
      if (queueable.length > 0) await queue.addBulk(queueable);
      return unwritable.length;
    }
  }

  /** Waits until `n` more lines fit in the batch's window, or none is out (a window smaller than one addBulk still moves). */
  private async waitForRoom(id: string, n: number, pace: Pace, log: Logger): Promise<void> {
    for (let look = 0; ; look++) {
      const r = await this.check(id, ['in_progress']);
      // Once per group of lines, the budget: the feed stops here, and starts again from the cursor once the pause ends.
      if (look === 0 && (await this.pausedForBudget(r, log))) throw new Interrupted();
      const done = r.completed + r.failed - r.invalid;
      pace.note(performance.now(), done);
      const out = r.fed - done;
      const short = out + n - this.o.maxOutstanding;
      if (short <= 0 || out <= 0) return;
      await sleep(nextLookMs(short, pace.perMs()));
    }
  }

  /**
   * A batch of a tenant that reached a monthly budget queues no more lines (those queued run on)
   * until the budget is raised or the month ends; its view says so while it waits. Read before
   * each group of lines is queued.
   */
  private async pausedForBudget(r: BatchRecord, log: Logger): Promise<boolean> {
    const message = await this.budgets.exhaustedAt(r.tenant || DEFAULT_TENANT, Date.now());
    const queue = () => this.o.queue(r.function);
    if (message) {
      if (!r.paused) await this.batches.pause(r.id, { code: 'budget_exhausted', message, since: new Date().toISOString() });
      // At every look: a chunk a replica split after the pause began is queued again as lines.
      const held = await holdBack(this.o.redis, queue(), r.id);
      if (!r.paused) log.warn({ tenant: r.tenant, reason: message, held }, 'batch paused: its tenant reached a monthly budget');
    } else if (r.paused) {
      const queued = await queueHeld(this.o.redis, queue(), r.id);
      await this.batches.pause(r.id, null);
      this.o.wake(r.function);
      log.info({ queued }, 'batch resumed');
    }
    return message !== null;
  }

  /**
   * Cancel (or fail): takes the batch's queued lines back out of the queue, waits for the ones
   * a replica already runs, then writes what finished.
   */
  private async stop(rec: BatchRecord, final: 'cancelled' | 'failed'): Promise<void> {
    const queue = this.o.queue(rec.function);
    const manifest = await this.o.registry.active(rec.function);
    const until = Date.now() + (manifest?.timeoutMs ?? 30_000) + 30_000;
    // Removes what waits and waits for what replicas hold (a job a replica holds is locked: not
    // removed), until none is left: a job whose replica died goes back to waiting and is removed
    // at the next look.
    let ids = (await batchJobs(queue, rec.id)).map((j) => j.id!);
    while (ids.length > 0 && Date.now() < until) {
      const held: string[] = [];
      for (const id of ids) {
        const state = await queue.getJobState(id);
        if (state === 'completed' || state === 'failed' || state === 'unknown') continue;
        if (state === 'active' || !(await queue.remove(id).catch(() => 0))) held.push(id);
      }
      ids = held;
      if (ids.length) await sleep(POLL_MS * 2);
    }
    // Line jobs a replica put back (a chunk it split) just before the batch stopped.
    for (const job of await batchJobs(queue, rec.id)) await queue.remove(job.id!).catch(() => 0);
    await this.finalize(rec, final);
  }

  /** Writes the output and error files from the recorded outcomes, then closes the batch. */
  private async finalize(rec: BatchRecord, final: BatchStatus & ('completed' | 'cancelled' | 'failed')): Promise<void> {
    const { output, errors } = await this.batches.results(rec.id);
    // Beside its input, in its tenant's space (a record from before tenants counts as the default's).
    const outputKey = s3Keys.batchOutput(rec.tenant || DEFAULT_TENANT, rec.id);
    const errorsKey = s3Keys.batchErrors(rec.tenant || DEFAULT_TENANT, rec.id);
    await this.o.store.put(outputKey, output, 'application/x-ndjson');
    await this.o.store.put(errorsKey, errors, 'application/x-ndjson');
    const at = new Date().toISOString();
    const stamp = final === 'completed' ? { completedAt: at } : final === 'cancelled' ? { cancelledAt: at } : { failedAt: at };
    await this.batches.transition(rec.id, ['in_progress', 'finalizing', 'cancelling', 'validating'], {
      status: final,
      outputUri: this.o.store.uri(outputKey),
      errorsUri: this.o.store.uri(errorsKey),
      ...stamp,
    });
    await this.batches.retire(rec.id);
    this.log.info({ batch: rec.id, status: final }, 'batch finished');
  }

  private async fail(rec: BatchRecord, error: string): Promise<void> {
    await this.batches.set(rec.id, { error });
    await this.stop(rec, 'failed');
  }

  /** The batch's record, if it is still in one of the statuses this step works in and we lead. */
  private async check(id: string, statuses: BatchStatus[]): Promise<BatchRecord> {
    const r = await this.batches.record(id);
    if (!this.leading || !r || !statuses.includes(r.status)) throw new Interrupted();
    return r;
  }

  /** The input's non-blank lines with their 1-based line numbers. */
  private async lines(rec: BatchRecord): Promise<AsyncIterable<{ line: number; text: string }>> {
    // A registration whose secret does not open here, or whose endpoint is now refused, will not heal by retrying.
    const from = await this.o.inputs.forUri(rec.tenant || DEFAULT_TENANT, rec.inputUri).catch((err: Error) => {
      throw new InputGone(`its input ${rec.inputUri} cannot be read: ${err.message}`);
    });
    if (!from) throw new InputGone(`its input ${rec.inputUri} is no longer readable: its bucket is not registered`);
    const stream = await from.stream(rec.inputUri).catch((err: unknown) => {
      // A tenant's own bucket that now refuses its registered credentials will not change its mind.
      if (from !== this.o.store && statusOf(err) === 403) throw new InputGone(`its input ${rec.inputUri} is no longer readable with the bucket's registered credentials (403)`);
      throw err;
    });
    const rl = createInterface({ input: stream, crlfDelay: Infinity });
    return (async function* () {
      let line = 0;
      try {
        for await (const text of rl) {
          line++;
          if (text.trim() !== '') yield { line, text };
        }
      } finally {
        rl.close();
        stream.destroy();
      }
    })();
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
