// How `embers tail` prints a tail's events (gateway/tail-events.ts): `pretty`, a line per event
// for a person (time, level, request id, message; a request's summary set apart, with the calling
// request's id when another function called it), or `json`, each event's data as one JSON line
// with its `type`, for a program.
import type { TailLine } from '../core/tail.ts';
import type { ServerEvent } from './sse.ts';

export type TailFormat = 'pretty' | 'json';

/** The text to print for an event (ending in a newline), or null for one that prints nothing. */
export function formatTailEvent(e: ServerEvent, format: TailFormat): string | null {
  if (e.event === 'dropped') {
    const { count } = JSON.parse(e.data) as { count: number };
    return format === 'json' ? `${JSON.stringify({ type: 'dropped', count })}\n` : `… ${count} line${count === 1 ? '' : 's'} dropped\n`;
  }
  if (e.event !== 'log' && e.event !== 'request') return null;
  const line = JSON.parse(e.data) as TailLine;
  if (format === 'json') return `${JSON.stringify(line)}\n`;
  return `${prettyLine(line)}\n`;
}

/** One line for a person: a log line's level and message, or a request's outcome (never its input or output). */
export function prettyLine(line: TailLine): string {
  const time = clock(line.time);
  if (line.type === 'log') {
    const fields = line.fields && Object.keys(line.fields).length ? ` ${JSON.stringify(line.fields)}` : '';
    // A starting replica's line names its phase and version where a request's names the request.
    const from = line.rid ?? `${line.phase} ${line.version} ${line.replica}`;
    return `${time} ${line.level.toUpperCase().padEnd(5)} ${from}  ${line.msg}${fields}`;
  }
  const outcome = line.status < 400 ? 'ok' : 'error';
  const cold = line.cold ? ` · cold${line.coldMs !== undefined ? ` ${round(line.coldMs)} ms` : ''}` : '';
  // A call from another function's handler names the calling request.
  const parent = line.parent ? ` ← ${line.parent}` : '';
  return `${time} ═════ ${line.rid}${parent}  ${line.status} ${outcome} in ${round(line.ms)} ms (queued ${round(line.queueMs)} ms) · ${line.version} · ${line.kind}${cold}`;
}

/** HH:MM:SS.mmm, local time. */
function clock(ms: number): string {
  const d = new Date(ms);
  const two = (n: number) => String(n).padStart(2, '0');
  return `${two(d.getHours())}:${two(d.getMinutes())}:${two(d.getSeconds())}.${String(d.getMilliseconds()).padStart(3, '0')}`;
}

const round = (ms: number) => (ms < 10 ? Math.round(ms * 10) / 10 : Math.round(ms));
