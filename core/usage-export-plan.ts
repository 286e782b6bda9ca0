// The pure half of the usage export (docs/decisions/038-usage-export.md): stream ids, where a
// record's file goes and what it is named, which existing files a batch must be checked against,
// and what an exporter does with the cursor and intent it finds. No I/O here.
import { hourOf } from './usage.ts';

/** Every export object lives under this prefix of the platform bucket: no tenant may name it (core/tenant-objects.ts). */
export const EXPORT_PREFIX = 'usage/';

/** A Redis stream id, `<ms>-<seq>`, as numbers. */
export function parseStreamId(id: string): [number, number] {
  const dash = id.indexOf('-');
  return dash < 0 ? [Number(id), 0] : [Number(id.slice(0, dash)), Number(id.slice(dash + 1))];
}

/** Orders stream ids as Redis does. */
export function compareIds(a: string, b: string): number {
  const [am, as] = parseStreamId(a);
  const [bm, bs] = parseStreamId(b);
  return am - bm || as - bs;
}

/** The cursor before anything was exported. */
export const START_ID = '0-0';

/** A record as read from the stream: its entry id and its JSON line, with what partitioning needs. */
export interface StreamRecord {
  streamId: string;
  line: string;
  /** The request's id (UsageRecord.id): unique per metered request. */
  id: string;
  tenant: string;
  /** ms since the epoch, from the record's `at`. */
  atMs: number;
}

/** A stream entry's record, or null when its line is not a usage record (kept out of every file). */
export function toStreamRecord(streamId: string, line: string): StreamRecord | null {
  try {
    const r = JSON.parse(line) as { id?: unknown; tenant?: unknown; at?: unknown };
    const atMs = typeof r.at === 'string' ? Date.parse(r.at) : NaN;
    if (typeof r.id !== 'string' || typeof r.tenant !== 'string' || !Number.isFinite(atMs)) return null;
    return { streamId, line, id: r.id, tenant: r.tenant, atMs };
  } catch {
    return null;
  }
}

/** The folder of a tenant's UTC hour: `usage/<tenant>/<YYYY-MM-DD>/<HH>/`, the same hour its roll-up counts it in (core/usage.ts hourKey). */
export function hourPrefix(tenant: string, atMs: number): string {
  const h = hourOf(new Date(atMs));
  return `${EXPORT_PREFIX}${tenant}/${h.slice(0, 4)}-${h.slice(4, 6)}-${h.slice(6, 8)}/${h.slice(8, 10)}/`;
}

/** The hour folders from `fromMs` (its hour included) to before `toMs`, oldest first. */
export function hourPrefixes(tenant: string, fromMs: number, toMs: number): string[] {
  const out: string[] = [];
  for (let t = Math.floor(fromMs / 3_600_000) * 3_600_000; t < toMs; t += 3_600_000) out.push(hourPrefix(tenant, t));
  return out;
}

/** One export object: the stream ids of its first and last record, and a number when that pair was taken. */
export interface ExportFile {
  key: string;
  first: string;
  last: string;
}

const FILE_NAME = /^(\d+-\d+)-(\d+-\d+)(?:_(\d+))?\.jsonl\.gz$/;

/** `<first>-<last>.jsonl.gz`, or `<first>-<last>_<n>.jsonl.gz` where that name is taken (after a failover reused stream ids). */
export function fileKey(prefix: string, first: string, last: string, taken: ReadonlySet<string>): string {
  let key = `${prefix}${first}-${last}.jsonl.gz`;
  for (let n = 2; taken.has(key); n++) key = `${prefix}${first}-${last}_${n}.jsonl.gz`;
  return key;
}

/** An export object's range from its key, or null for a key that is not one. */
export function parseFileKey(key: string): ExportFile | null {
  const m = FILE_NAME.exec(key.slice(key.lastIndexOf('/') + 1));
  return m ? { key, first: m[1], last: m[2] } : null;
}

/** Files holding any stream id from `first` to `last`: the ones a batch's records may already be in. */
export const overlapping = (files: ExportFile[], first: string, last: string): ExportFile[] => files.filter((f) => compareIds(f.first, last) <= 0 && compareIds(f.last, first) >= 0);

/** A batch's records by hour folder, each in stream order. */
export function partition(records: StreamRecord[]): Map<string, StreamRecord[]> {
  const out = new Map<string, StreamRecord[]>();
  for (const r of records) {
    const prefix = hourPrefix(r.tenant, r.atMs);
    const group = out.get(prefix);
    if (group) group.push(r);
    else out.set(prefix, [r]);
  }
  return out;
}

/** A file's lines: by time, then stream order, so that a reader merges files cheaply. */
export function fileBody(records: StreamRecord[]): string {
  const sorted = [...records].sort((a, b) => a.atMs - b.atMs || compareIds(a.streamId, b.streamId));
  return sorted.map((r) => `${r.line}\n`).join('');
}

/** The exact range of the next batch, written before any of its files: `(after, last]`. */
export interface ExportIntent {
  after: string;
  last: string;
}

export const encodeIntent = (i: ExportIntent): string => JSON.stringify({ after: i.after, last: i.last });

export function decodeIntent(raw: string | null): ExportIntent | null {
  if (!raw) return null;
  try {
    const i = JSON.parse(raw) as Partial<ExportIntent>;
    return typeof i.after === 'string' && typeof i.last === 'string' ? { after: i.after, last: i.last } : null;
  } catch {
    return null;
  }
}

/**
 * What an exporter does with the cursor and intent it reads: finish the intent left by an
 * exporter that stopped part way (the same range again); forget one that no longer starts at the
 * cursor (a failover rolled one of them back: its files are deduplicated against like any); or
 * plan the next batch after the cursor.
 */
export type ExportStep = { kind: 'redo'; intent: ExportIntent } | { kind: 'forget'; raw: string } | { kind: 'plan'; after: string };

export function nextStep(cursor: string | null, rawIntent: string | null): ExportStep {
  const after = cursor ?? START_ID;
  if (rawIntent === null) return { kind: 'plan', after };
  const intent = decodeIntent(rawIntent);
  return intent && intent.after === after ? { kind: 'redo', intent } : { kind: 'forget', raw: rawIntent };
}

/**
 * The records of a group to write: those no overlapping file already holds (by request id), and
 * the key to write them under; null when every one is held already (a redo after its PUT).
 */
export function fileToWrite(prefix: string, group: StreamRecord[], held: ReadonlySet<string>, taken: ReadonlySet<string>): { key: string; records: StreamRecord[] } | null {
  const records = group.filter((r) => !held.has(r.id));
  if (records.length === 0) return null;
  return { key: fileKey(prefix, records[0].streamId, records[records.length - 1].streamId, taken), records };
}

/**
 * Puts records in time order with bounded memory: holds the `capacity` earliest seen so far and
 * lets the earliest go as more come. Files and the stream are each nearly in time order (machines'
 * clocks differ by little), so a record is rarely more than a few places out of it.
 */
export class TimeOrder {
  private readonly heap: { r: StreamRecord; n: number }[] = [];
  private n = 0;

  constructor(private readonly capacity: number) {}

  /** Adds a record; returns the earliest held once more than `capacity` are. */
  push(r: StreamRecord): StreamRecord | undefined {
    const h = this.heap;
    h.push({ r, n: this.n++ });
    for (let i = h.length - 1; i > 0; ) {
      const up = (i - 1) >> 1;
      if (!this.before(h[i], h[up])) break;
      [h[i], h[up]] = [h[up], h[i]];
      i = up;
    }
    return h.length > this.capacity ? this.pop() : undefined;
  }

  /** The earliest record held, or undefined when none is. */
  pop(): StreamRecord | undefined {
    const h = this.heap;
    if (h.length === 0) return undefined;
    const top = h[0];
    const last = h.pop()!;
    if (h.length > 0) {
      h[0] = last;
      for (let i = 0; ; ) {
        const [l, r] = [2 * i + 1, 2 * i + 2];
        let m = i;
        if (l < h.length && this.before(h[l], h[m])) m = l;
        if (r < h.length && this.before(h[r], h[m])) m = r;
        if (m === i) break;
        [h[i], h[m]] = [h[m], h[i]];
        i = m;
      }
    }
    return top.r;
  }

  private before(a: { r: StreamRecord; n: number }, b: { r: StreamRecord; n: number }): boolean {
    return a.r.atMs < b.r.atMs || (a.r.atMs === b.r.atMs && a.n < b.n);
  }
}
