// The runs a replica has sent its user-code process and not had answered, as the replica knows
// them: what the process may still send for each (its bytes, chunks within credit, log lines),
// and by when a live one is answered by the replica itself. What the process says is checked
// against this (user-code-process.ts), never the other way round.
import type { CheckedResult } from './user-code-channel.ts';
import type { CallRequest } from '../channel/messages.ts';

/** A run in the process. */
export interface RunSlot {
  resolve: (r: CheckedResult) => void;
  rid: string;
  /** Where its chunks go (runtime/replica/chunk-sink.ts checks them), and how many more it may send. */
  onChunk?: (data: unknown) => void;
  chunksLeft: number;
  /** Where its `ctx.log` lines go (runtime/replica/tail.ts checks them). */
  onLog?: (call: unknown) => void;
  /** Where its handler's calls to other functions go (runtime/replica/calls.ts checks them). */
  onCall?: (call: CallRequest) => void;
  /** Its bytes frame, come ahead of its result. */
  bytes?: Buffer;
  /** A live run: by when (ms on the caller's clock) the replica answers it itself, and its budget. */
  answerBy?: number;
  timeoutMs?: number;
}

/** Runs answered at their timeout that are remembered: the newest this many. */
const KEPT = 256;

function remember(set: Set<number>, n: number): void {
  set.add(n);
  if (set.size > KEPT) set.delete(set.values().next().value!);
}

export class RunsInFlight {
  private readonly runs = new Map<number, RunSlot>();
  /** Runs the replica answered at their timeout: the process may still answer them, once. */
  private readonly timedOut = new Set<number>();

  add(n: number, slot: RunSlot): void {
    this.runs.set(n, slot);
  }

  get(n: number): RunSlot | undefined {
    return this.runs.get(n);
  }

  /** Removes run n, if in flight, and returns it. */
  take(n: number): RunSlot | undefined {
    const run = this.runs.get(n);
    if (!run) return undefined;
    this.runs.delete(n);
    return run;
  }

  get size(): number {
    return this.runs.size;
  }

  /** Takes every run (the process is gone). */
  takeAll(): RunSlot[] {
    const all = [...this.runs.values()];
    this.runs.clear();
    return all;
  }

  /** The live runs past their time at `now`, oldest first. */
  due(now: number): number[] {
    const due: number[] = [];
    for (const [n, run] of this.runs) if (run.answerBy !== undefined && now >= run.answerBy) due.push(n);
    return due;
  }

  /** Takes run n, answered at its timeout: its late messages are still taken (wasTimedOut). */
  timeOut(n: number): RunSlot | undefined {
    const run = this.take(n);
    if (run) remember(this.timedOut, n);
    return run;
  }

  /** Whether run n was answered at its timeout. */
  wasTimedOut(n: number): boolean {
    return this.timedOut.has(n);
  }

  /** Its late result came: nothing more of it is taken after this. */
  forgetTimedOut(n: number): boolean {
    return this.timedOut.delete(n);
  }
}
