// A function's tail (`embers tail`): its handlers' `ctx.log` lines and one summary line per
// finished request, from every replica, on one Redis stream per function. Replicas write it only
// while some gateway tails the function (keys.tailing); gateways read it with XREAD BLOCK and
// serve it as Server-Sent Events. Everything here is bounded: each line, the stream (by count and
// by bytes), and the batches replicas write and gateways read.
import type { Redis } from 'ioredis';
import { keys } from './keys.ts';

export { capLogCall, safeJson, START_PHASES, TAIL_LEVELS, TAIL_MAX_FIELDS_CHARS, TAIL_MAX_MSG_CHARS, type LogCall, type StartPhase, type TailLevel } from './log-lines.ts';
import type { LogCall } from './log-lines.ts';

/** The stream keeps about this many lines… */
export const TAIL_MAX_LINES = 2000;
/** …and about this many bytes of them (fewer lines when they are long). */
export const TAIL_MAX_BYTES = 2 * 1024 * 1024;
/** A stream nobody writes to goes after this long (a function no longer tailed). */
export const TAIL_STREAM_TTL_MS = 60_000;
/** How long one gateway's mark (keys.tailing) lasts; a tailing gateway renews it every third of it. */
export const TAIL_GATE_TTL_MS = 10_000;

/** A `ctx.log` line as the tail carries it: a request's (`rid`), or a starting replica's (`phase`). */
export interface TailLogLine extends LogCall {
  type: 'log';
  rid?: string;
  /** The cold-start phase of a starting replica's line: setup or warmup for its `ctx.log`, any for the line saying where its start failed. */
  phase?: string;
  version: string;
  replica: string;
}

/** One finished request: never its input or output. */
export interface TailRequestLine {
  type: 'request';
  time: number;
  rid: string;
  status: number;
  /** The handler's time and the queue's (ms). */
  ms: number;
  queueMs: number;
  /** It waited for a replica to start; coldMs: for how long. */
  cold: boolean;
  coldMs?: number;
  version: string;
  kind: 'sync' | 'async' | 'batch';
  replica: string;
  /** A call from another function's handler: the calling request's id. */
  parent?: string;
}

export type TailLine = TailLogLine | TailRequestLine;

/** The count cap of a write whose lines average `avgBytes`: TAIL_MAX_LINES, fewer when lines are long. */
export function tailMaxLen(avgBytes: number): number {
  return Math.max(64, Math.min(TAIL_MAX_LINES, Math.floor(TAIL_MAX_BYTES / Math.max(1, avgBytes))));
}

/** One line of a replica's, numbered: a gap in a replica's numbers is lines it dropped. */
export interface TailEntry {
  n: number;
  /** The number of its session's first line (the replica's gate last opened there). */
  s?: number;
  /** The line's JSON. */
  d: string;
}

/** Adds lines to function `fn`'s tail, trimming it to its caps, in one round trip. */
export async function addTailLines(redis: Redis, fn: string, entries: TailEntry[]): Promise<void> {
  if (!entries.length) return;
  const key = keys.tail(fn);
  const avg = entries.reduce((sum, e) => sum + e.d.length, 0) / entries.length;
  const maxLen = tailMaxLen(avg);
  const pipe = redis.pipeline();
  for (const e of entries) pipe.xadd(key, 'MAXLEN', '~', maxLen, '*', 'n', e.n, 's', e.s ?? e.n, 'd', e.d);
  pipe.pexpire(key, TAIL_STREAM_TTL_MS);
  const res = (await pipe.exec()) ?? [];
  const failed = res.find(([err]) => err);
  if (failed) throw failed[0];
}

/** A stream entry's fields as a numbered line, or undefined if they are not one. */
export function entryOf(fields: string[]): (TailEntry & { line: TailLine }) | undefined {
  let n: number | undefined;
  let s: number | undefined;
  let d: string | undefined;
  for (let i = 0; i + 1 < fields.length; i += 2) {
    if (fields[i] === 'n') n = Number(fields[i + 1]);
    else if (fields[i] === 's') s = Number(fields[i + 1]);
    else if (fields[i] === 'd') d = fields[i + 1];
  }
  if (n === undefined || !Number.isSafeInteger(n) || d === undefined) return undefined;
  if (s !== undefined && (!Number.isSafeInteger(s) || s > n)) s = undefined;
  try {
    const line = JSON.parse(d) as TailLine;
    return line && (line.type === 'log' || line.type === 'request') ? { n, s, d, line } : undefined;
  } catch {
    return undefined;
  }
}
