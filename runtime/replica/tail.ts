// The replica's half of the tail (core/tail.ts): whether anyone tails its function (TailGate),
// and the lines it writes while someone does (TailWriter): its tailed runs' `ctx.log` lines, those
// of its setup and warmup, and a summary line per request. A function nobody tails costs a cached boolean per request.
import type { Redis } from 'ioredis';
import { keys } from '../../core/keys.ts';
import type { Logger } from '../../core/log.ts';
import { addTailLines, capLogCall, type TailLine, type TailRequestLine, type TailEntry } from '../../core/tail.ts';

/** How long the replica trusts what it last read of keys.tailing (ms). */
export const GATE_MAX_AGE_MS = 1_000;
/** Lines waiting to be written, at most; past it, lines are dropped and counted (summaries have as many again). */
export const WRITER_MAX_PENDING = 2_000;
/** Lines written in one round trip, at most, and how long a first line waits for others (ms). */
export const WRITER_BATCH = 500;
export const WRITER_DELAY_MS = 50;

/**
 * Whether the function is tailed, as last read (`check`), read again in the background once the
 * answer is older than GATE_MAX_AGE_MS; `nudge` says yes at once (a gateway began tailing).
 */
export class TailGate {
  private value = false;
  private checkedAt = -Infinity;
  private checking = false;
  /** Bumped by a nudge: a read that began before it is not trusted over it. */
  private generation = 0;

  /** Told when the gate opens (someone began tailing): the writer's lines start a new session. */
  onOpen?: () => void;

  constructor(
    private readonly check: () => Promise<boolean>,
    private readonly now: () => number = () => performance.now(),
  ) {}

  private set(v: boolean): void {
    if (v && !this.value) this.onOpen?.();
    this.value = v;
  }

  on(): boolean {
    if (!this.checking && this.now() - this.checkedAt >= GATE_MAX_AGE_MS) this.refresh();
    return this.value;
  }

  nudge(): void {
    this.generation++;
    this.set(true);
    this.checkedAt = this.now();
  }

  private refresh(): void {
    this.checking = true;
    const generation = this.generation;
    this.check().then(
      (v) => {
        this.checking = false;
        if (generation !== this.generation) return;
        this.set(v);
        this.checkedAt = this.now();
      },
      () => {
        // Redis unreachable: keep what was known, and read again on a later request.
        this.checking = false;
        this.checkedAt = this.now();
      },
    );
  }
}

export interface TailWriterOptions {
  replica: string;
  version: string;
  /** Writes numbered lines (core/tail.ts addTailLines); a failure loses them, which readers see as dropped. */
  write: (entries: TailEntry[]) => Promise<void>;
  /** Told once per failing stretch. */
  onWriteError?: (err: Error) => void;
}

/**
 * Batches the replica's tail lines into few writes. Each line is numbered as it comes, dropped or
 * not: a reader counts a gap in a replica's numbers as lines dropped, whether here (too many
 * waiting), in the user code (over its budget) or in a write that failed.
 */
export class TailWriter {
  private seq = 0;
  /** The number of the first line since the gate last opened: a reader that first sees this replica counts what it missed since. */
  private sessionStart = 1;
  private pending: TailEntry[] = [];
  private timer?: NodeJS.Timeout;
  private writing?: Promise<void>;
  private failing = false;

  constructor(private readonly o: TailWriterOptions) {}

  /** A tailed run's `ctx.log` line, as the user code sent it (checked and cut here). */
  log(rid: string, raw: unknown): void {
    const call = capLogCall(raw);
    if (call) this.add({ type: 'log', ...call, rid, version: this.o.version, replica: this.o.replica }, WRITER_MAX_PENDING);
  }

  /** A `ctx.log` line of the replica's setup or warmup as the user code sent it, or the replica's own line on its failed start. */
  startLog(phase: string, raw: unknown): void {
    const call = capLogCall(raw);
    if (call) this.add({ type: 'log', ...call, phase, version: this.o.version, replica: this.o.replica }, WRITER_MAX_PENDING);
  }

  /** A finished request's summary. */
  request(r: Omit<TailRequestLine, 'type' | 'time' | 'version' | 'replica'>): void {
    this.add({ type: 'request', time: Date.now(), ...r, version: this.o.version, replica: this.o.replica }, 2 * WRITER_MAX_PENDING);
  }

  /** Someone began tailing: lines from here on are a new session's. */
  session(): void {
    this.sessionStart = this.seq + 1;
  }

  /** Lines dropped before they reached the replica. */
  dropped(count: number): void {
    this.seq += count;
  }

  /** Writes what waits, and waits for it. */
  async flush(): Promise<void> {
    clearTimeout(this.timer);
    this.timer = undefined;
    while (this.writing || this.pending.length) {
      if (this.writing) await this.writing;
      else this.writeSome();
    }
  }

  private add(line: TailLine, max: number): void {
    const n = ++this.seq;
    if (this.pending.length >= max) return;
    this.pending.push({ n, s: this.sessionStart, d: JSON.stringify(line) });
    if (!this.timer && !this.writing) this.timer = setTimeout(() => this.writeSome(), WRITER_DELAY_MS);
    this.timer?.unref?.();
  }

  private writeSome(): void {
    this.timer = undefined;
    if (this.writing || !this.pending.length) return;
    const batch = this.pending.splice(0, WRITER_BATCH);
    this.writing = this.o.write(batch).then(
      () => {
        this.failing = false;
      },
      (err: Error) => {
        if (!this.failing) this.o.onWriteError?.(err);
        this.failing = true;
      },
    );
    void this.writing.finally(() => {
      this.writing = undefined;
      // What came meanwhile goes next, at once: a busy tail is written as fast as Redis takes it.
      if (this.pending.length) this.writeSome();
    });
  }
}

/** A replica's gate and writer for its function's tail, wired together: the gate opening starts a session. */
export function replicaTail(o: { redis: Redis; fn: string; replica: string; version: string; log: Logger }): { gate: TailGate; writer: TailWriter } {
  const gate = new TailGate(async () => (await o.redis.exists(keys.tailing(o.fn))) === 1);
  const writer = new TailWriter({
    replica: o.replica,
    version: o.version,
    write: (entries) => addTailLines(o.redis, o.fn, entries),
    onWriteError: (err) => o.log.warn({ err: err.message }, 'could not write to the function\'s tail; its readers see the lines as dropped'),
  });
  gate.onOpen = () => writer.session();
  return { gate, writer };
}
