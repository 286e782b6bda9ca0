// The replica's watch over its user-code process's time and reading, apart from the messages it
// sends: live runs past their timeout are answered here (a handler holding the process's thread
// lets no timer run there), the process's watchdog names the run holding that thread
// (runtime/user-code/watchdog.ts), and a process that answers while leaving its channel from the
// replica unread is ended (what the replica writes to it would grow without bound).
import type { Readable } from 'node:stream';
import { errorBody } from '../../core/contracts.ts';
import { unrunTiming } from '../channel/timing.ts';
import type { RunsInFlight } from './runs-in-flight.ts';
import { Bucket } from './user-code-channel.ts';

/** How long past a live run's timeout the replica waits for the process before answering 504 itself. */
export const TIMEOUT_SLACK_MS = 1000;
/** Most runs the watchdog may name a second (an honest one names one a second at most). */
const WATCHDOG_REPORTS_PER_S = 20;
/** A process whose thread is free but that leaves this much of its channel unread for BACKLOG_MS is not reading it. */
const BACKLOG_BYTES = 1024 * 1024;
const BACKLOG_MS = 5_000;
/** Unread past this while it answers, it is not reading it, whatever the time. */
const MAX_BACKLOG_BYTES = 256 * 1024 * 1024;
/** How often the replica looks. */
const CHECK_MS = 250;

/** What the watch needs of its UserCodeProcess. */
export interface WatchedProcess {
  runs: RunsInFlight;
  /** How long since the process last sent a message (ms). */
  silentMs(): number;
  /** Bytes written to the process that it has not read. */
  unread(): number;
  /** Asks the process for a sign of life (a stats message). */
  probe(): void;
  /** The handler of run `rid` holds the process: replace it, handing the other runs over. */
  stuck(rid: string): void;
  violation(why: string): void;
}

export class RunWatch {
  /** The run the process's watchdog last named as holding its thread (forgotten when the process speaks). */
  private blockedBy?: number;
  /** Since when the channel to the process has had more than BACKLOG_BYTES unread. */
  private backlogSince?: number;
  private readonly timer: NodeJS.Timeout;

  constructor(
    private readonly p: WatchedProcess,
    private readonly watchdog?: Readable,
  ) {
    if (watchdog) this.readWatchdog(watchdog);
    this.timer = setInterval(() => this.check(), CHECK_MS);
    this.timer.unref();
  }

  /** The process spoke: its thread is free. */
  heard(): void {
    this.blockedBy = undefined;
  }

  stop(): void {
    clearInterval(this.timer);
    this.watchdog?.destroy();
  }

  private check(): void {
    this.checkBacklog();
    this.answerOverdue();
  }

  /**
   * Live runs past their timeout and slack. A process that speaks is late: they are answered 504
   * and it is asked for a sign of life. A silent one's thread is held: by the run its watchdog
   * names, which is answered at its own time and the process replaced (the others handed over);
   * by one it cannot name, all are handed over.
   */
  private answerOverdue(): void {
    const { runs } = this.p;
    const due = runs.due(Date.now());
    if (!due.length) return;
    if (this.p.silentMs() < TIMEOUT_SLACK_MS) {
      for (const n of due) this.answerTimeout(n);
      this.p.probe();
      return;
    }
    const holder = this.blockedBy !== undefined ? runs.get(this.blockedBy) : undefined;
    if (!holder) return this.p.stuck(`(the user code's thread is held, by a run it could not name)`);
    // A batch line has no time of its own here: the live runs due behind it are handed over now.
    if (holder.answerBy === undefined) return this.p.stuck(holder.rid);
    // The runs due behind a live one wait for its time (at most its timeout), then are handed over.
    if (!due.includes(this.blockedBy!)) return;
    this.answerTimeout(this.blockedBy!);
    this.p.stuck(holder.rid);
  }

  private answerTimeout(n: number): void {
    const run = this.p.runs.timeOut(n);
    run?.resolve({ status: 504, body: JSON.stringify(errorBody('timeout', `the handler did not finish within ${run.timeoutMs} ms`)), timing: unrunTiming(0) });
  }

  /** A process whose thread is free (it speaks) but that leaves its channel unread is answering runs it never read. */
  private checkBacklog(): void {
    const unread = this.p.unread();
    if (unread <= BACKLOG_BYTES) return void (this.backlogSince = undefined);
    this.backlogSince ??= Date.now();
    // Silent, its thread is held (timeouts deal with that), and no answer frees a slot for more.
    if (this.p.silentMs() >= TIMEOUT_SLACK_MS) return;
    if (unread > MAX_BACKLOG_BYTES || Date.now() - this.backlogSince >= BACKLOG_MS) this.p.violation(`left ${Math.round(unread / 2 ** 20)} MiB of its channel from the replica unread while answering`);
  }

  /** Reads the watchdog's pipe: run numbers, 4 bytes each; a flood of them breaks the channel. */
  private readWatchdog(stream: Readable): void {
    let rest: Buffer = Buffer.alloc(0);
    const reports = new Bucket(WATCHDOG_REPORTS_PER_S, () => performance.now());
    stream.on('error', () => {});
    stream.on('data', (chunk: Buffer) => {
      rest = rest.length ? Buffer.concat([rest, chunk]) : chunk;
      for (; rest.length >= 4; rest = rest.subarray(4)) {
        if (!reports.take()) return this.p.violation(`named the run holding its thread more than ${WATCHDOG_REPORTS_PER_S} times a second`);
        this.blockedBy = rest.readUInt32LE(0);
      }
    });
  }
}
