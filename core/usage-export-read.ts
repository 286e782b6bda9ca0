// A tenant's raw usage records of a period, as JSON lines in time order: the exported files of each
// hour, then what the Redis stream still holds (not exported yet), each record once. Streamed:
// one file and a bounded window of records are held at a time.
//
// A file counts once the cursor has passed its range (its batch committed); records after the
// cursor are read from the stream. An export that commits during the read trims records the read
// has not reached yet: each page of the stream is read with the cursor in one transaction, and
// when the cursor moved, the files it committed are read instead, less the records already given
// from the stream.
import type { Redis } from 'ioredis';
import { usageKeys } from './keys.ts';
import type { ObjectStore } from './s3.ts';
import { fileLines, listFiles } from './usage-export-files.ts';
import { compareIds, hourPrefixes, parseStreamId, START_ID, TimeOrder, toStreamRecord, type ExportFile, type StreamRecord } from './usage-export-plan.ts';

const PAGE = 1_000;
/** Records held back to put them in time order. */
const ORDER_WINDOW = 10_000;
/** How far before its stream id a record's `at` may be (clocks, a tick's wait): the hours searched for files committed during a read. */
const AT_SLACK_MS = 3_600_000;

export interface ExportQuery {
  tenant: string;
  fromMs: number;
  /** Not included. */
  toMs: number;
}

export async function* readUsageExport(redis: Redis, store: ObjectStore, q: ExportQuery): AsyncGenerator<string> {
  const order = new TimeOrder(ORDER_WINDOW);
  const within = (r: StreamRecord | null): r is StreamRecord => r !== null && r.tenant === q.tenant && r.atMs >= q.fromMs && r.atMs < q.toMs;
  /** Files of the hours from `fromMs` that `pick` keeps, each in stream order. */
  async function* files(fromMs: number, pick: (f: ExportFile) => boolean, skip?: ReadonlySet<string>): AsyncGenerator<string> {
    for (const prefix of hourPrefixes(q.tenant, Math.max(q.fromMs, fromMs), q.toMs)) {
      const picked = (await listFiles(store, prefix)).filter(pick).sort((a, b) => compareIds(a.first, b.first));
      for (const f of picked) {
        for await (const line of fileLines(store, f.key)) {
          const r = toStreamRecord(f.first, line);
          if (!within(r) || skip?.has(r.id)) continue;
          const out = order.push(r);
          if (out) yield out.line;
        }
      }
    }
  }

  let cursor = (await redis.get(usageKeys.exportCursor)) ?? START_ID;
  yield* files(q.fromMs, (f) => compareIds(f.last, cursor) <= 0);

  const fromStream = new Set<string>();
  let pos = cursor;
  for (;;) {
    const res = (await redis.multi().get(usageKeys.exportCursor).xrange(usageKeys.records, `(${pos}`, '+', 'COUNT', PAGE).exec()) ?? [];
    const [[getErr, now], [rangeErr, entries]] = res as [[Error | null, string | null], [Error | null, [string, string[]][]]];
    if (getErr || rangeErr) throw getErr ?? rangeErr;
    const moved = now ?? START_ID;
    if (compareIds(moved, cursor) > 0) {
      const since = cursor;
      yield* files(parseStreamId(since)[0] - AT_SLACK_MS, (f) => compareIds(f.last, since) > 0 && compareIds(f.last, moved) <= 0, fromStream);
      cursor = moved;
      if (compareIds(pos, cursor) < 0) pos = cursor;
      continue;
    }
    if (entries.length === 0) break;
    for (const [id, fields] of entries) {
      const r = toStreamRecord(id, fields[1] ?? '');
      if (!within(r)) continue;
      fromStream.add(r.id);
      const out = order.push(r);
      if (out) yield out.line;
    }
    pos = entries[entries.length - 1][0];
  }
  for (let r = order.pop(); r; r = order.pop()) yield r.line;
}
