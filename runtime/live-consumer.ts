// A replica's reader of its function's live stream (core/live-queue.ts). One blocking
// XREADGROUP asks for as many requests as the replica has free slots, so a burst is fetched in
// one round trip rather than one per job; requests finished in the same tick are finished in one
// call (their usage records, replies, XACK and XDEL: finishLiveEntries). A replica with nothing
// else running sends a lone request's reply just before that call instead (flushFinished).
//
// Crash safety comes from the group's pending list. While a replica holds requests it re-claims
// them for itself every lockMs / 3 (XCLAIM … JUSTID resets their idle time without counting a
// delivery), and every replica scans the pending list, a step each time, for entries idle longer
// than lockMs: those of a replica that died. It takes them into a backlog it runs before anything
// new. The delivery count says how many replicas were handed a request, so a request that keeps
// killing its replica can be answered instead of run again. A replica that drains leaves its
// backlog pending, to be taken over again at once: it hands those entries over (XCLAIM … IDLE
// of a day makes them claimable now), as does a replica that abandons what it holds (replaced as
// stuck), and a replica's agent once its process has exited (crashed, killed: scheduler/agent.ts).
// A hand-over tells the function's replicas to scan at once (scanNow); a replica also scans once
// as it starts, so a replacement takes them within a moment.
import type { Redis } from 'ioredis';
import type { RunJobData } from '../core/contracts.ts';
import { claimLiveEntries, decodeLiveJob, ensureLiveGroup, finishLiveEntries, handOverLiveEntries, leaveLiveGroup, LIVE_GROUP, liveStream, readLiveEntries, type LiveEntry, type LiveOutcome } from '../core/live-queue.ts';
import type { Logger } from '../core/log.ts';
import { waitAtMost } from '../core/settle.ts';

/** How long one read waits for work before looking again (bounds how long a drain waits for the reader). */
const BLOCK_MS = 1000;
/** Tries at finishing a tick's requests (100 and 400 ms apart) before leaving them pending. */
const FINISH_ATTEMPTS = 3;

export interface LiveConsumerOptions {
  redis: Redis;
  fn: string;
  /** The consumer's name in the group: the replica id. */
  consumer: string;
  concurrency: number;
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
// does not take bytes in that field answers it 415 (runtime/replica.ts).

export class LiveConsumer {
  private readonly stream: string;
  private reader?: Redis;
  private reading?: Promise<void>;
  private tending?: NodeJS.Timeout;
  private stopped = false;
  /** Entries this replica holds: running, or waiting in the backlog. */
  private readonly held = new Set<string>();
  private slotFreed?: () => void;
  private idle?: () => void;
  private finished: { id: string; outcome?: LiveOutcome }[] = [];
  /** The tending call under way, if any. */
  private tendingNow?: Promise<void>;
  /** Finishing calls under way (drain waits for them). */
  private readonly flushes = new Set<Promise<void>>();
  /** Taken over from silent replicas, held (and kept) by this one, run before anything new. */
  private backlog: { id: string; fields: Buffer[]; deliveries: number }[] = [];
  /** Where the scan for silent replicas' entries goes on from (it covers the pending list in steps). */
  private claimCursor = '0-0';
  /** A whole scan was asked for (scanNow): the next tending makes it. */
  private rescan = false;

  constructor(private readonly o: LiveConsumerOptions) {
    this.stream = liveStream(o.fn);
  }

  async start(): Promise<void> {
    await ensureLiveGroup(this.o.redis, this.o.fn);
    // XREADGROUP BLOCK holds its connection: a connection of its own.
    this.reader = this.o.redis.duplicate();
    this.reader.on('error', () => {});
    this.tending = setInterval(() => this.tendNow(), Math.max(100, Math.floor(this.o.lockMs / 3)));
    this.reading = this.read();
    // A first scan now: requests a replica handed over (or its predecessor left) run at once.
    this.tendNow();
  }

  private tendNow(): void {
    // One at a time: while Redis is unreachable, calls would otherwise pile up behind each other.
    if (this.tendingNow) return;
    this.tendingNow = this.tend().then(
      () => {
        this.tendingNow = undefined;
        // Asked for while this one ran (its scan may have passed the handed-over entries). After
        // a failure, the interval tries again: Redis refusing at once must not make a busy loop.
        if (this.rescan && !this.stopped) this.tendNow();
      },
      (err: Error) => {
        this.tendingNow = undefined;
        this.o.log.warn({ err: err.message }, 'could not tend held requests');
      },
    );
  }

  /**
   * Scans the whole pending list now (told that requests were handed over: handOverLiveEntries),
   * rather than a step at its next tending: from its start, until it has gone round or its
   * backlog is full. Not once stopped: its tending would take back what it handed over itself.
   */
  scanNow(): void {
    if (this.stopped || !this.tending) return;
    this.rescan = true;
    this.tendNow();
  }

  /** Requests running now: those held, less those waiting in the backlog. */
  private get active(): number {
    return this.held.size - this.backlog.length;
  }

  /** Takes no more requests and waits for those it holds; then leaves the group. */
  async drain(): Promise<void> {
    this.stopped = true;
    // The reader returns within BLOCK_MS, unless Redis is unreachable: then stop waiting for it.
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([this.reading, new Promise((r) => (timer = setTimeout(r, BLOCK_MS + 1000)))]);
    clearTimeout(timer);
    this.reader?.disconnect();
    if (this.active > 0) await new Promise<void>((resolve) => (this.idle = resolve));
    clearInterval(this.tending);
    // What it took over and never started (a scan under way may still add some): claimable by
    // another replica now, not after lockMs, and not counted as a crash of this one.
    await this.tendingNow;
    await this.handOver(this.backlog.map((b) => b.id), true);
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
  }

  /**
   * Makes entries this replica still holds claimable at once, and tells the function's replicas
   * to scan (handOverLiveEntries); `unrun`: it never started them, so its delivery is not
   * counted. Gives up after a second.
   */
  private async handOver(ids: string[], unrun = false): Promise<void> {
    await waitAtMost(handOverLiveEntries(this.o.redis, this.o.fn, this.o.consumer, { ids, unrun }), 1000, this.o.log, 'the hand-over of held requests');
  }

  private async read(): Promise<void> {
    while (!this.stopped) {
      // Requests taken over from a silent replica are older than anything new: they go first.
      while (this.backlog.length && this.active < this.o.concurrency) {
        const { id, fields, deliveries } = this.backlog.shift()!;
        this.launch(id, fields, deliveries);
      }
      if (this.active >= this.o.concurrency) {
        await new Promise<void>((resolve) => (this.slotFreed = resolve));
        continue;
      }
      let entries: LiveEntry[];
      try {
        entries = await readLiveEntries(this.reader!, this.o.fn, this.o.consumer, this.o.concurrency - this.active, BLOCK_MS);
      } catch (err) {
        if (this.stopped) return;
        const message = (err as Error).message;
        // The stream was deleted under us: make the group again.
        if (message.includes('NOGROUP')) await ensureLiveGroup(this.o.redis, this.o.fn).catch(() => {});
        else {
          this.o.log.warn({ err: message }, 'reading the live queue failed; retrying');
          await new Promise((r) => setTimeout(r, 500));
        }
        continue;
      }
      // Entries read while stopping are run all the same: they are this replica's now.
      for (const [id, fields] of entries) {
        this.held.add(id);
        this.launch(id, fields, 1);
      }
    }
  }

  /** Runs an entry this replica holds (it is in `held`). */
  private launch(id: string, fields: Buffer[], deliveries: number): void {
    let data: RunJobData | undefined;
    try {
      data = decodeLiveJob(fields);
    } catch {
      data = undefined;
    }
    if (!data) {
      this.o.log.error({ entry: id }, 'unreadable live queue entry dropped');
      this.held.delete(id);
      return this.finish(id);
    }
    void this.o.process(id, data, deliveries).then(
      (outcome) => this.done(id, outcome || undefined),
      (err: Error) => {
        // Not finished (e.g. Redis refused the job record's update): left pending, not held, so
        // it runs again after lockMs (here or on another replica), where a finished job record
        // is metered and its webhook queued. Its delivery count bounds how often.
        this.o.log.error({ err, rid: data.rid }, 'live request failed outside its handler; it will run again after the lock time');
        this.done(id, undefined, false);
      },
    );
  }

  private done(id: string, outcome?: LiveOutcome, finish = true): void {
    this.held.delete(id);
    if (finish) this.finish(id, outcome);
    this.slotFreed?.();
    this.slotFreed = undefined;
    if (this.active === 0) this.idle?.();
  }

  /** Requests finished in one tick are finished in Redis together: one call for all of them. */
  private finish(id: string, outcome?: LiveOutcome): void {
    this.finished.push({ id, outcome });
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
    // for its script too (~0.1–0.2 ms at c = 1, where it runs cold after inference). Busier
    // replicas keep one call per tick. If the publish fails, the reply rides in the call as usual.
    const lone = entries.length === 1 && this.active === 0 ? entries[0] : undefined;
    let answered = false;
    if (lone?.outcome?.reply) {
      const { channel, message } = lone.outcome.reply;
      answered = await this.o.redis.publish(channel, message).then(
        () => true,
        () => false,
      );
      if (answered) entries = [{ id: lone.id, outcome: { usage: lone.outcome.usage } }];
    }
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
   * Keeps what it holds, and takes over requests whose replica went silent, into the backlog
   * (counted as held at once, so they are kept alive too and never taken twice).
   */
  private async tend(): Promise<void> {
    if (this.held.size) await this.o.redis.xclaim(this.stream, LIVE_GROUP, this.o.consumer, 0, ...this.held, 'JUSTID');
    const whole = this.rescan;
    this.rescan = false;
    if (whole) this.claimCursor = '0-0';
    do {
      if (this.stopped || this.backlog.length >= this.o.concurrency) return;
      const [next, claimed] = await claimLiveEntries(this.o.redis, this.o.fn, this.o.consumer, this.o.lockMs, this.claimCursor, this.o.concurrency - this.backlog.length);
      this.claimCursor = next;
      await this.takeOver(claimed);
    } while (whole && this.claimCursor !== '0-0');
  }

  /** Entries claimed from silent replicas go to the backlog, with their delivery counts. */
  private async takeOver(claimed: LiveEntry[]): Promise<void> {
    const fresh = claimed.filter(([id]) => !this.held.has(id));
    if (!fresh.length) return;
    for (const [id] of fresh) this.held.add(id);
    const pipe = this.o.redis.pipeline();
    for (const [id] of fresh) pipe.xpending(this.stream, LIVE_GROUP, id, id, 1);
    const counts = ((await pipe.exec()) ?? []).map(([, r]) => (r as [string, string, number, number][] | undefined)?.[0]?.[3]);
    fresh.forEach(([id, fields], i) => {
      const deliveries = counts[i] ?? 2;
      this.o.log.warn({ entry: id, deliveries }, 'took over a request whose replica went silent');
      this.backlog.push({ id, fields, deliveries });
    });
    // A reader waiting for a free slot looks at the backlog when one frees; one blocked on the
    // stream sees it within BLOCK_MS.
  }
}
