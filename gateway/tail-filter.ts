// Which tail lines a reader sees (GET /v1/functions/:name/tail?status=&version=&search=), and a
// reader's backlog. Pure: the lines come in, the lines to send and the count dropped come out.
import { safeJson, type TailLine } from '../core/tail.ts';

/** A line as read from the stream: parsed, and its JSON as it was written (what is sent). */
export interface TailItem {
  line: TailLine;
  d: string;
}

export interface TailFilterSpec {
  /** `ok` (below 400), `error` (400 and up), or one status code. */
  status?: 'ok' | 'error' | number;
  version?: string;
  /** A substring of a log line's message, fields or request id. */
  search?: string;
}

/** Log lines held for their request's summary (a status filter), at most, for all requests together. */
export const HELD_MAX = 1_000;
/** Requests remembered for a filter (lines matched, lines evicted), at most. */
const REQUESTS_MAX = 1_000;

export function statusMatches(want: TailFilterSpec['status'], status: number): boolean {
  if (want === undefined) return true;
  if (want === 'ok') return status < 400;
  if (want === 'error') return status >= 400;
  return status === want;
}

/**
 * One reader's filter. A log line's request has no status until its summary comes, so with a
 * status filter log lines are held (HELD_MAX in all) and sent with the summary if it matches;
 * lines evicted to keep that bound count as dropped only if their request turns out to match.
 * With a search, a summary is sent when its request id matches or one of its log lines did.
 */
export class TailFilter {
  private readonly held = new Map<string, TailItem[]>();
  private heldCount = 0;
  private readonly evicted = new Map<string, number>();
  private readonly matched = new Map<string, true>();

  constructor(private readonly spec: TailFilterSpec) {}

  /** The items to send of `items`, in order, and how many lines were lost on the way. */
  take(items: TailItem[]): { show: TailItem[]; dropped: number } {
    const show: TailItem[] = [];
    let dropped = 0;
    for (const item of items) {
      const { line } = item;
      if (this.spec.version !== undefined && line.version !== this.spec.version) continue;
      if (line.type === 'log') {
        if (!this.searched(line)) continue;
        if (line.rid === undefined) {
          if (startLineShown(this.spec.status, line.level)) show.push(item);
          continue;
        }
        if (this.spec.search !== undefined) remember(this.matched, line.rid, true);
        if (this.spec.status === undefined) show.push(item);
        else this.hold(item, line.rid);
        continue;
      }
      const held = this.held.get(line.rid) ?? [];
      const evicted = this.evicted.get(line.rid) ?? 0;
      const searched = this.spec.search === undefined || line.rid.includes(this.spec.search) || this.matched.has(line.rid);
      this.held.delete(line.rid);
      this.heldCount -= held.length;
      this.evicted.delete(line.rid);
      this.matched.delete(line.rid);
      if (!searched || !statusMatches(this.spec.status, line.status)) continue;
      show.push(...held, item);
      dropped += evicted;
    }
    return { show, dropped };
  }

  private searched(line: Extract<TailLine, { type: 'log' }>): boolean {
    const s = this.spec.search;
    return s === undefined || line.msg.includes(s) || (line.rid ?? line.phase ?? '').includes(s) || (line.fields !== undefined && safeJson(line.fields).includes(s));
  }

  private hold(item: TailItem, rid: string): void {
    const list = this.held.get(rid);
    if (list) list.push(item);
    else this.held.set(rid, [item]);
    this.heldCount++;
    while (this.heldCount > HELD_MAX) {
      const [oldest, lines] = this.held.entries().next().value as [string, TailItem[]];
      lines.shift();
      this.heldCount--;
      remember(this.evicted, oldest, (this.evicted.get(oldest) ?? 0) + 1);
      if (!lines.length) this.held.delete(oldest);
    }
  }
}

/**
 * A starting replica's line (setup, warmup) belongs to no request: shown without a status filter,
 * and with `error` when it is an error (a setup that fails is what that reader looks for).
 */
function startLineShown(want: TailFilterSpec['status'], level: string): boolean {
  return want === undefined || (want === 'error' && (level === 'error' || level === 'fatal'));
}

/** Sets `key` in a map kept to REQUESTS_MAX entries, the oldest forgotten first. */
function remember<V>(map: Map<string, V>, key: string, value: V): void {
  map.delete(key);
  map.set(key, value);
  if (map.size > REQUESTS_MAX) map.delete(map.keys().next().value as string);
}

/**
 * A reader's backlog, while its caller is slow to take it: the newest `max` items; older ones
 * are skipped and counted, so a slow reader falls behind by a bounded amount and is told by how much.
 */
export class TailBacklog {
  private items: TailItem[] = [];
  private dropped = 0;

  constructor(private readonly max: number) {}

  push(items: TailItem[], dropped = 0): void {
    this.dropped += dropped;
    if (items.length) this.items.push(...items);
    const over = this.items.length - this.max;
    if (over > 0) {
      this.items.splice(0, over);
      this.dropped += over;
    }
  }

  get empty(): boolean {
    return this.items.length === 0 && this.dropped === 0;
  }

  /** Up to `max` items, oldest first, and the lines dropped since the last take. */
  take(max: number): { items: TailItem[]; dropped: number } {
    const items = this.items.splice(0, max);
    const dropped = this.dropped;
    this.dropped = 0;
    return { items, dropped };
  }
}
