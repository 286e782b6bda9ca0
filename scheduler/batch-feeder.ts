// The batch feeder: while its scheduler leads, it walks every unfinished batch through
// validating → in_progress → finalizing → completed (or cancelling → cancelled, or failed).
// It feeds lines into the function's batch queue (below live traffic) with a bounded number
// outstanding, so a 100k-line batch never floods Redis. Every step resumes from Redis state.
import { createInterface } from 'node:readline';
import type { Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import { BATCH_TERMINAL, BatchStore, errorLine, type BatchRecord, type BatchStatus } from '../core/batches.ts';
import { keys, s3Keys, type RunJobData } from '../core/contracts.ts';
import type { Logger } from '../core/log.ts';
import type { Registry } from '../core/registry.ts';
import type { ObjectStore } from '../core/s3.ts';
import { compileInputSchema, describeErrors } from '../core/validate.ts';

export interface BatchFeederOptions {
  redis: Redis;
  store: ObjectStore;
  registry: Registry;
  log: Logger;
  /** Lines of one batch in its function's queue at once. */
  maxOutstanding: number;
  /** Work was queued for a function: decide its scale now. */
  wake(fn: string): void;
  /** The function's queue (the scheduler's, shared). */
  queue(fn: string): Queue;
}

const POLL_MS = 100;
const MIN_LOOK_MS = 10;
const CHUNK = 64;

/** A batch moved on (cancel asked, leadership lost): the current step stops and the loop re-reads it. */
class Interrupted extends Error {}

/**
 * When the feeder, short of `short` lines of room in the batch's window, looks again: when
 * about half of them should have finished at the rate seen since its last look (`perMs` lines
 * a ms; undefined on the first look), within [10, 100] ms. The window must not drain between
 * two looks: at a fixed 100 ms a 256-line window held `echo` (~4k lines/s) to ~2.7–3.2k lines/s
 * with a sixth of the machine idle, as it emptied in ~60 ms and then waited. A slow function
 * (`ocr`, ~25 lines/s) is still looked at every 100 ms: one HGETALL a look.
 */
export function nextLookMs(short: number, perMs: number | undefined): number {
  if (perMs === undefined) return MIN_LOOK_MS;
  if (perMs <= 0) return POLL_MS;
  return Math.min(POLL_MS, Math.max(MIN_LOOK_MS, short / perMs / 2));
}

export const batchJobId = (batch: string, line: number) => `${batch}.${line}`;

export class BatchFeeder {
  private readonly batches: BatchStore;
  private readonly loops = new Map<string, Promise<void>>();
  private leading = false;
  private closed = false;
  private readonly log: Logger;

  constructor(private readonly o: BatchFeederOptions) {
    this.batches = new BatchStore(o.redis);
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
          if (!(err instanceof Interrupted)) throw err;
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
    if (!manifest) return this.fail(rec, `function ${rec.function} no longer exists`);
    const valid = compileInputSchema(manifest.inputSchema);
    const seen = new Set<string>();
    let total = 0;
    let bad = 0;
    for await (const { line, text } of await this.lines(rec)) {
      if (line % 1000 === 0) await this.check(rec.id, ['validating']);
      total++;
      const item = parseLine(text);
      let error: { code: string; message: string } | undefined;
      let cid: string | null = null;
      if ('error' in item) error = item.error;
      else {
        cid = item.cid;
        if (seen.has(cid)) error = { code: 'duplicate_custom_id', message: `custom_id "${cid}" appears on an earlier line; each must be unique` };
        else if (!valid(item.input)) error = { code: 'invalid_input', message: `input does not match the schema of ${rec.function}: ${describeErrors(valid)}` };
        seen.add(cid);
      }
      if (error) {
        bad++;
        await this.batches.lineDone(rec.id, line, false, errorLine(cid, line, error), true);
      }
    }
    if (total === 0) return this.fail(rec, 'the input file has no lines; each line must be {"custom_id": "…", "input": {…}}');
    log.info({ total, invalid: bad }, 'batch validated');
    await this.batches.transition(rec.id, ['validating'], { status: 'in_progress', total, inProgressAt: new Date().toISOString() });
  }

  /** Queues the valid lines not yet queued, keeping at most maxOutstanding in the queue. */
  private async feed(rec: BatchRecord, log: Logger): Promise<void> {
    const queue = this.o.queue(rec.function);
    const done = await this.batches.doneLines(rec.id);
    let chunk: { line: number; cid: string; input: unknown; bin: number }[] = [];
    let cursor = rec.cursor;
    const flush = async () => {
      if (chunk.length === 0) return;
      await this.waitForRoom(rec.id, chunk.length);
      const enq = Date.now();
      await queue.addBulk(
        chunk.map(({ line, cid, input, bin }) => ({
          name: 'batch',
          data: { rid: batchJobId(rec.id, line), batch: { id: rec.id, line, cid }, input, enq, t: rec.tenant, k: rec.key, bin } satisfies RunJobData,
          opts: { jobId: batchJobId(rec.id, line), removeOnComplete: true, removeOnFail: { count: 100 }, attempts: 1 },
        })),
      );
      await this.o.redis.multi().hset(keys.batch(rec.id), 'cursor', cursor).hincrby(keys.batch(rec.id), 'fed', chunk.length).exec();
      this.o.wake(rec.function);
      chunk = [];
    };
    for await (const { line, text } of await this.lines(rec)) {
      if (line <= rec.cursor || done.has(line)) continue;
      const item = parseLine(text);
      if ('error' in item) continue; // recorded while validating
      chunk.push({ line, cid: item.cid, input: item.input, bin: Buffer.byteLength(text) });
      cursor = line;
      if (chunk.length >= CHUNK) await flush();
    }
    await flush();
    log.debug('batch fully queued');
    // Everything is queued: wait for the last lines, then write the files.
    for (let i = 0; ; i++) {
      const r = await this.check(rec.id, ['in_progress']);
      if (r.completed + r.failed >= r.total) break;
      if (i % 50 === 49 && !(await this.o.registry.active(rec.function))) return this.fail(r, `function ${rec.function} was deleted while the batch ran`);
      await sleep(POLL_MS * 2);
    }
    await this.batches.transition(rec.id, ['in_progress'], { status: 'finalizing', finalizingAt: new Date().toISOString() });
  }

  private async waitForRoom(id: string, n: number): Promise<void> {
    let last: { at: number; done: number } | undefined;
    for (;;) {
      const r = await this.check(id, ['in_progress']);
      const done = r.completed + r.failed - r.invalid;
      const short = r.fed - done + n - this.o.maxOutstanding;
      if (short <= 0) return;
      const at = performance.now();
      const perMs = last && at > last.at ? (done - last.done) / (at - last.at) : undefined;
      last = { at, done };
      await sleep(nextLookMs(short, perMs));
    }
  }

  /**
   * Cancel (or fail): takes the batch's queued lines back out of the queue, waits for the ones
   * a replica already runs, then writes what finished.
   */
  private async stop(rec: BatchRecord, final: 'cancelled' | 'failed'): Promise<void> {
    const queue = this.o.queue(rec.function);
    const done = await this.batches.doneLines(rec.id);
    const running: number[] = [];
    for await (const { line } of await this.lines(rec)) {
      if (line > rec.cursor) break;
      if (done.has(line)) continue;
      const removed = await queue.remove(batchJobId(rec.id, line)).catch(() => 0);
      if (!removed && (await queue.getJob(batchJobId(rec.id, line)))) running.push(line);
    }
    const manifest = await this.o.registry.active(rec.function);
    const until = Date.now() + (manifest?.timeoutMs ?? 30_000) + 30_000;
    for (const line of running) {
      while (Date.now() < until && !(await this.batches.hasResult(rec.id, line)) && (await queue.getJob(batchJobId(rec.id, line)))) await sleep(POLL_MS * 2);
    }
    await this.finalize(rec, final);
  }

  /** Writes the output and error files from the recorded outcomes, then closes the batch. */
  private async finalize(rec: BatchRecord, final: BatchStatus & ('completed' | 'cancelled' | 'failed')): Promise<void> {
    const { output, errors } = await this.batches.results(rec.id);
    const outputKey = s3Keys.batchOutput(rec.id);
    const errorsKey = s3Keys.batchErrors(rec.id);
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
    const stream = await this.o.store.stream(rec.inputUri);
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

/** One input line: `{ "custom_id": "…", "input": … }`, or why it is not one. */
export function parseLine(text: string): { cid: string; input: unknown } | { error: { code: string; message: string } } {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch (err) {
    return { error: { code: 'invalid_json', message: `line is not valid JSON: ${(err as Error).message}` } };
  }
  if (typeof v !== 'object' || v === null || Array.isArray(v)) return { error: { code: 'invalid_line', message: 'each line must be a JSON object {"custom_id": "…", "input": {…}}' } };
  const { custom_id: cid, input } = v as { custom_id?: unknown; input?: unknown };
  if (typeof cid !== 'string' || cid === '') return { error: { code: 'missing_custom_id', message: 'line has no "custom_id" (a non-empty string)' } };
  return { cid, input };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
