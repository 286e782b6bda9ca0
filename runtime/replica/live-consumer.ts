// A replica's reader of its function's live stream (core/live-queue.ts). One blocking
// XREADGROUP asks for as many requests as the replica has free slots, so a burst is fetched in
// one round trip rather than one per job; requests finished in the same tick are finished in one
// call (their usage records, replies, XACK and XDEL: finishLiveEntries). A replica with nothing
// else running sends a lone request's reply just before that call instead, as every replica does
// a reply of 16 KiB or more (flushFinished).
//
// Crash safety comes from the group's pending list. While a replica holds requests it re-claims
// them for itself every lockMs / 3 (XCLAIM … JUSTID resets their idle time without counting a
// delivery), and at the same pace every replica looks for an entry idle longer than lockMs: one
// whose replica died. It takes such requests one at a time, with nothing else running, and runs
// each alone before anything new (`alone`). The delivery count says how many replicas were
// handed a request, so a request that keeps killing its replica can be answered instead of run
// again, and running alone keeps that count from growing on the requests that ran beside it. A
// replica that abandons what it holds (replaced as stuck) hands it over (XCLAIM … IDLE of a day
// makes it claimable now), as does a replica's agent once its process has exited (crashed,
// killed: scheduler/exited-requests.ts). A hand-over tells the function's replicas to look at once
// (scanNow); a replica also looks as it starts, so a replacement takes them within a moment.
import type { Redis } from 'ioredis';
import type { RunJobData } from '../../core/contracts.ts';
import { claimLiveEntry, ensureLiveGroup, finishLiveEntries, handOverLiveEntries, hasLiveEntryToClaim, leaveLiveGroup, LIVE_GROUP, readLiveEntries, type FinishedEntry, type LiveOutcome, type TakenOver } from '../../core/live-queue.ts';
import { decodeLiveJob, hasSpilledPart, SPILL_MIN_BYTES, type LiveEntry } from '../../core/live-entry.ts';
import type { Logger } from '../../core/log.ts';
import { waitAtMost } from '../../core/settle.ts';
import { liveStream } from '../../core/keys.ts';

/** How long one read waits for work before looking again; a drain or a hand-over wakes it sooner. */
const BLOCK_MS = 5000;
/** Longest a busy replica stops reading new requests so that what runs ends and it can take one over alone (read). */
const TAKE_OVER_WAIT_MS = 2_000;
/** Tries at finishing a tick's requests (100 and 400 ms apart) before leaving them pending. */
const FINISH_ATTEMPTS = 3;

export interface LiveConsumerOptions {
  redis: Redis;
  fn: string;
  /** The consumer's name in the group: the replica id. */
  consumer: string;
  concurrency: number;
  /** Slots that requests waiting on calls may lend at once (lend). @default 0 */
  maxLent?: number;
  /** An entry held this long without a sign of life from its replica is taken over by another. */
  lockMs: number;
  /**
   * Runs one request; what it resolves with (usage record, reply) is written when the entry is
   * acknowledged. `deliveries` counts the replicas it was handed to, this one included.
   */
  process: (entry: string, data: RunJobData, deliveries: number) => Promise<LiveOutcome | void>;
  log: Logger;
}

// Entries are read as Buffers (LiveEntry). Any replica may read a binary body: one whose version
// does not take bytes in that field answers it 415 (runtime/replica/replica.ts).

export class LiveConsumer {
  private readonly stream: string;
  private reader?: Redis;
  private reading?: Promise<void>;
  private tending?: NodeJS.Timeout;
  private stopped = false;
  /** Entries this replica holds (all running). */
  private readonly held = new Set<string>();
  private slotFreed?: () => void;
  private idle?: () => void;
  private finished: FinishedEntry[] = [];
  /** The tending call under way, if any. */
  private tendingNow?: Promise<void>;
  /** Finishing calls under way (drain waits for them). */
  private readonly flushes = new Set<Promise<void>>();
  /**
   * The request taken over that runs now, alone among this replica's live requests. A replica's
   * death ends every request it held, so the ones that ran beside a request that kills replicas
   * come back with it, their delivery counts raised too; taken over together and run together
   * again, they would reach the crash limit with it and be answered `replica_crashed` unrun. So
   * a replica takes them one at a time, and only with nothing else running (one held while it
   * waited would be counted too if this replica died meanwhile): told there are some
   * (`lookForTakeOver`), it reads nothing new, lets what runs end (TAKE_OVER_WAIT_MS at most;
   * then it reads on until its next tending looks again), takes the oldest, runs it alone, and
   * looks again when it ends. A second crash is then the request's own. Batch lines may still
   * run beside it.
   */
  private alone?: string;
  /** Requests may wait to be taken over (a hand-over's notice, a tending's look, one run alone ended): the reader looks before reading anything new. */
  private lookForTakeOver = true;
  /** When lookForTakeOver was set, and how many times it was asked for (a notice during a look makes it look again). */
  private lookedAt = 0;
  private looks = 0;
  /** The reader connection's client id, and whether it is in a blocking read now (scanNow wakes it). */
  private readerId?: number;
  private readerBlocked = false;

  constructor(private readonly o: LiveConsumerOptions) {
    this.stream = liveStream(o.fn);
  }

  async start(): Promise<void> {
    await ensureLiveGroup(this.o.redis, this.o.fn);
    // XREADGROUP BLOCK holds its connection: a connection of its own.
    const reader = (this.reader = this.o.redis.duplicate());
    reader.on('error', () => {});
    // Its id, to wake it from its blocking read when requests wait to be taken over (scanNow); a new
    // one after each reconnection.
    reader.on('ready', () => void reader.client('ID').then((id) => (this.readerId = id as number), () => {}));
    this.tending = setInterval(() => this.tendNow(), Math.max(100, Math.floor(this.o.lockMs / 3)));
    this.lookedAt = performance.now();
    // Its first turn looks for requests to take over (lookForTakeOver starts set): those a replica
    // handed over, or its predecessor left, run before anything new.
    this.reading = this.read();
  }

  private tendNow(): void {
    // One at a time: while Redis is unreachable, calls would otherwise pile up behind each other.
    if (this.tendingNow) return;
    this.tendingNow = this.tend()
      .catch((err: Error) => this.o.log.warn({ err: err.message }, 'could not tend held requests'))
      .finally(() => (this.tendingNow = undefined));
  }

  /**
   * Looks for a request to take over as soon as nothing runs here (told that requests were
   * handed over: handOverLiveEntries) rather than at its next tending. A reader blocked on the
   * stream is woken (its read answers nothing), not left to notice within BLOCK_MS.
   */
  scanNow(): void {
    if (this.stopped) return;
    this.lookFor();
    this.wakeReader();
  }

  /** Ends a read blocked on the stream now (it answers nothing). */
  private wakeReader(): void {
    if (this.readerBlocked && this.readerId !== undefined) void this.o.redis.client('UNBLOCK', this.readerId).catch(() => 0);
  }

  private lookFor(): void {
    if (!this.lookForTakeOver) this.lookedAt = performance.now();
    this.lookForTakeOver = true;
    this.looks++;
  }

  /** Requests running now, less those whose slots are lent while they wait on calls (lend). */
  private get active(): number {
    return this.held.size - this.lent;
  }

  /** Slots lent by requests waiting on their calls to other functions. */
  private lent = 0;

  /**
   * A request here waits on calls (ctx.call): its slot is lent until reclaim, so the calls it waits
   * on (its own function's, on this very replica, included) find a slot. At most `maxLent` are
   * lent at once; false when none was.
   */
  lend(): boolean {
    if (this.lent >= (this.o.maxLent ?? 0)) return false;
    this.lent++;
    this.slotFreed?.();
    this.slotFreed = undefined;
    return true;
  }

  /** A request that lent its slot (lend) runs on: the slot is its again. */
  reclaim(): void {
    this.lent = Math.max(0, this.lent - 1);
  }

  /** Takes no more requests and waits for those it holds; then leaves the group. */
  async drain(): Promise<void> {
    this.stopped = true;
    this.wakeReader();
    // The reader returns at once (or within BLOCK_MS), unless Redis is unreachable: then stop waiting for it.
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([this.reading, new Promise((r) => (timer = setTimeout(r, BLOCK_MS + 1000)))]);
    clearTimeout(timer);
    this.reader?.disconnect();
    if (this.held.size > 0) await new Promise<void>((resolve) => (this.idle = resolve));
    clearInterval(this.tending);
    await this.tendingNow;
    // Finishing calls still under way too: leaving the group checks that nothing is pending.
    this.track(this.flushFinished());
    await Promise.all(this.flushes);
    await leaveLiveGroup(this.o.redis, this.o.fn, this.o.consumer).catch(() => {});
  }

  /**
   * Stops at once without waiting for what it holds (a replica replacing itself as stuck): those
   * requests are handed over, claimable by any replica now (their delivery counts as a crash, as
   * it would have after lockMs). Unreachable, Redis lets them go after lockMs as before.
   */
  async abandon(): Promise<void> {
    this.stopped = true;
    clearInterval(this.tending);
    this.reader?.disconnect();
    await this.handOver([...this.held]);
    // What it answered meanwhile is acknowledged before the process goes.
    await new Promise((r) => setImmediate(r));
    await waitAtMost(Promise.all(this.flushes), 1000, this.o.log, 'the last answers to be finished');
  }

  /** Reads and claims nothing more (its user code is gone): what it holds waits for abandon. */
  stop(): void {
    this.stopped = true;
    this.wakeReader();
  }

  /** Makes entries this replica still holds claimable at once, and tells the function's replicas (handOverLiveEntries). Gives up after a second. */
  private async handOver(ids: string[]): Promise<void> {
    await waitAtMost(handOverLiveEntries(this.o.redis, this.o.fn, this.o.consumer, ids), 1000, this.o.log, 'the hand-over of held requests');
  }

  private async read(): Promise<void> {
    while (!this.stopped) {
      // Requests taken over from a replica that died holding them are older than anything new:
      // they go first, one at a time, each alone (see `alone`).
      if (this.lookForTakeOver && this.held.size === 0) {
        const looks = this.looks;
        let entry: TakenOver | undefined;
        try {
          entry = await claimLiveEntry(this.o.redis, this.o.fn, this.o.consumer, this.o.lockMs);
        } catch (err) {
          if (this.stopped) return;
          await this.recover(err as Error, 'looking for requests to take over');
          continue;
        }
        if (!entry) {
          // Unless a notice came while it looked: then look again.
          if (this.looks === looks) this.lookForTakeOver = false;
          continue;
        }
        const { id, fields, deliveries } = entry;
        this.o.log.warn({ entry: id, deliveries }, 'took over a request whose replica went silent');
        this.held.add(id);
        this.alone = id;
        this.launch(id, fields, deliveries);
        continue;
      }
      if (this.lookForTakeOver && this.alone === undefined) {
        // Busy: nothing new is read until what runs has ended, for TAKE_OVER_WAIT_MS at most; then
        // it reads on, and its next tending looks again (an idle replica takes them meanwhile).
        const left = TAKE_OVER_WAIT_MS - (performance.now() - this.lookedAt);
        if (left <= 0) this.lookForTakeOver = false;
        else await this.oneEnds(left);
        continue;
      }
      if (this.alone !== undefined || this.active >= this.o.concurrency) {
        await this.oneEnds();
        continue;
      }
      let entries: LiveEntry[];
      try {
        this.readerBlocked = true;
        entries = await readLiveEntries(this.reader!, this.o.fn, this.o.consumer, this.o.concurrency - this.active, BLOCK_MS).finally(() => (this.readerBlocked = false));
      } catch (err) {
        if (this.stopped) return;
        await this.recover(err as Error, 'reading the live queue');
        continue;
      }
      // Entries read while stopping are run all the same: they are this replica's now.
      for (const [id, fields] of entries) {
        this.held.add(id);
        this.launch(id, fields, 1);
      }
    }
  }

  /** Until a request running here ends (done), or `ms` has passed. */
  private async oneEnds(ms?: number): Promise<void> {
    const ended = new Promise<void>((resolve) => (this.slotFreed = resolve));
    if (ms === undefined) return ended;
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([ended, new Promise((r) => (timer = setTimeout(r, ms)))]);
    clearTimeout(timer);
  }

  /** After a failed read or look: a stream deleted under it (Redis restarted empty) gets its group again; else a pause. */
  private async recover(err: Error, what: string): Promise<void> {
    const made = err.message.includes('NOGROUP') && (await ensureLiveGroup(this.o.redis, this.o.fn).then(() => true, () => false));
    if (made) return;
    this.o.log.warn({ err: err.message }, `${what} failed; retrying`);
    await new Promise((r) => setTimeout(r, 500));
  }

  /** Runs an entry this replica holds (it is in `held`). */
  private launch(id: string, fields: Buffer[], deliveries: number): void {
    const spilled = hasSpilledPart(fields);
    let data: RunJobData | undefined;
    try {
      data = decodeLiveJob(fields);
    } catch {
      data = undefined;
    }
    if (!data) {
      this.o.log.error({ entry: id }, 'unreadable live queue entry dropped');
      return this.done(id, undefined, true, spilled);
    }
    void this.o.process(id, data, deliveries).then(
      (outcome) => this.done(id, outcome || undefined, true, spilled),
      (err: Error) => {
        // Not finished (e.g. Redis refused the job record's update): left pending, not held, so
        // it runs again after lockMs (here or on another replica), where a finished job record
        // is metered and its webhook queued. Its delivery count bounds how often.
        this.o.log.error({ err, rid: data.rid }, 'live request failed outside its handler; it will run again after the lock time');
        this.done(id, undefined, false);
      },
    );
  }

  private done(id: string, outcome?: LiveOutcome, finish = true, spilled?: boolean): void {
    this.held.delete(id);
    if (finish) this.finish(id, outcome, spilled);
    if (id === this.alone) {
      this.alone = undefined;
      // Another replica's requests may still wait to be taken over, one at a time.
      this.lookFor();
    }
    this.slotFreed?.();
    this.slotFreed = undefined;
    if (this.held.size === 0) this.idle?.();
  }

  /** Requests finished in one tick are finished in Redis together: one call for all of them. */
  private finish(id: string, outcome?: LiveOutcome, spilled?: boolean): void {
    this.finished.push({ id, outcome, spilled });
    if (this.finished.length === 1) setImmediate(() => this.track(this.flushFinished()));
  }

  private track(flush: Promise<void>): void {
    this.flushes.add(flush);
    void flush.finally(() => this.flushes.delete(flush));
  }

  private async flushFinished(): Promise<void> {
    if (!this.finished.length) return;
    let entries = this.finished;
    this.finished = [];
    // A replica with nothing else running (light load) that finished one request sends its reply
    // on its own, then the finishing call once Redis has taken it: Redis writes a PUBLISH's
    // message only after every command of the same read, so inside the call the client would wait
    // for its script too (~0.1–0.2 ms at c = 1, where it runs cold after inference). So does a
    // reply from SPILL_MIN_BYTES: as an argument of the call, Redis's Lua would hash every byte of
    // it (decisions/042). Busier replicas keep the other replies in one call per tick. If a
    // publish fails, its reply rides in the call as usual.
    const lone = entries.length === 1 && this.active === 0 ? entries[0] : undefined;
    const own = entries.filter((e) => e.outcome?.reply && (e === lone || e.outcome.reply.message.length >= SPILL_MIN_BYTES));
    const sent = new Set<FinishedEntry>();
    await Promise.all(
      own.map(async (e) => {
        const { channel, message } = e.outcome!.reply!;
        if (await this.o.redis.publish(channel, message).then(() => true, () => false)) sent.add(e);
      }),
    );
    const answered = sent.size > 0;
    if (answered) entries = entries.map((e) => (sent.has(e) ? { ...e, outcome: { usage: e.outcome!.usage } } : e));
    // A short Redis hiccup must not hold a reply back for lockMs (nor count as a crash): retry.
    // An answered request is retried for up to half the lock time (another replica may take it
    // over after lockMs): left pending, it would run again for a caller who already has its answer.
    const until = answered ? performance.now() + this.o.lockMs / 2 : 0;
    for (let attempt = 1; ; attempt++) {
      try {
        await finishLiveEntries(this.o.redis, this.o.fn, entries);
        return;
      } catch (err) {
        const wait = Math.min(1000, 100 * 4 ** (attempt - 1));
        if (attempt >= FINISH_ATTEMPTS && performance.now() + wait > until) {
          // Left pending: they run again after lockMs (at least once, as with any queue), and are
          // metered then; an answered caller's gateway drops the second reply.
          this.o.log.warn({ err: (err as Error).message, entries: entries.length, answered }, 'could not finish requests (usage, reply, acknowledgement); they stay pending and run again after the lock time');
          return;
        }
        await new Promise((r) => setTimeout(r, wait));
      }
    }
  }

  /**
   * Keeps what it holds, and looks for requests whose replica went silent (or that were handed
   * over): the reader takes them (read), one at a time.
   */
  private async tend(): Promise<void> {
    if (this.held.size) await this.o.redis.xclaim(this.stream, LIVE_GROUP, this.o.consumer, 0, ...this.held, 'JUSTID');
    if (!this.stopped && !this.lookForTakeOver && (await hasLiveEntryToClaim(this.o.redis, this.o.fn, this.o.lockMs))) this.scanNow();
  }
}
