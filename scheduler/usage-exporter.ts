// The leading scheduler's usage export: raw usage records leave the Redis stream for gzip JSONL
// files in the platform bucket, by tenant and UTC hour, each exactly once, and the stream keeps
// only what is not exported yet (docs/decisions/038-usage-export.md). One batch:
//   1. the range `(cursor, last]` is recorded as the intent (compare-and-set on the cursor), or an
//      intent left by an exporter that stopped part way is taken up again as it is;
//   2. each tenant-hour's records are checked against the files of that hour whose id range
//      overlaps theirs (a redo, or a cursor a failover rolled back), and those not held are written;
//   3. the commit moves the cursor, drops the intent and trims the stream in one Lua call, only
//      while that intent is the one recorded.
import type { Redis } from 'ioredis';
import { usageKeys } from '../core/keys.ts';
import type { Logger } from '../core/log.ts';
import { lua } from '../core/lua.ts';
import { evalScript } from '../core/redis.ts';
import type { ObjectStore } from '../core/s3.ts';
import { fileIds, listFiles, writeFile } from '../core/usage-export-files.ts';
import { encodeIntent, fileBody, fileToWrite, nextStep, overlapping, partition, toStreamRecord, type ExportIntent, type StreamRecord } from '../core/usage-export-plan.ts';

const INTEND = lua('usage-export-intend');
const COMMIT = lua('usage-export-commit');
const FORGET = lua('usage-export-forget');

/** Hour folders written at once. */
const PARALLEL_WRITES = 8;

export interface UsageExporterOptions {
  redis: Redis;
  store: ObjectStore;
  log: Logger;
  /** How long the exporter waits after a batch that was not full (EMBERS_USAGE_EXPORT_INTERVAL_MS). @default 5000 */
  intervalMs: number;
  /** Most records per batch (EMBERS_USAGE_EXPORT_BATCH); a full batch is followed by the next at once. @default 20000 */
  batchRecords: number;
}

/** A batch whose files are written and whose commit is due. */
export interface PreparedBatch {
  intent: ExportIntent;
  /** The intent exactly as Redis holds it: the commit compares it. */
  raw: string;
  /** Stream entries in the range. */
  entries: number;
  /** Objects written (none: every record was already in a file). */
  written: string[];
}

export class UsageExporter {
  private leading = false;
  private loop: Promise<void> | null = null;
  private wake?: () => void;
  private readonly log: Logger;

  constructor(private readonly o: UsageExporterOptions) {
    this.log = o.log.child({ component: 'usage-export' });
  }

  /** Exports while this scheduler leads, stops when it no longer does. */
  sync(leading: boolean): void {
    this.leading = leading;
    if (leading && !this.loop) this.loop = this.run().finally(() => (this.loop = null));
    if (!leading) this.wake?.();
  }

  private async run(): Promise<void> {
    while (this.leading) {
      let entries = 0;
      try {
        entries = await this.step();
      } catch (err) {
        this.log.warn({ err: (err as Error).message }, 'usage export failed; it is tried again');
      }
      if (entries < this.o.batchRecords && this.leading) await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, this.o.intervalMs);
        this.wake = () => (clearTimeout(timer), resolve());
      });
    }
  }

  /** One batch, written and committed: the stream entries it took (0: none waited, or another exporter holds the range). */
  async step(): Promise<number> {
    const batch = await this.prepare();
    if (!batch) return 0;
    return (await this.commit(batch)) ? batch.entries : 0;
  }

  /** Steps 1 and 2: a range recorded (or taken up again) and its files written; nothing committed. */
  async prepare(): Promise<PreparedBatch | null> {
    const { redis } = this.o;
    const [cursor, rawIntent] = await redis.mget(usageKeys.exportCursor, usageKeys.exportIntent);
    const step = nextStep(cursor, rawIntent);
    if (step.kind === 'forget') {
      this.log.warn({ intent: step.raw, cursor }, 'dropping a usage export intent that does not start at the cursor');
      await evalScript(redis, FORGET, 1, usageKeys.exportIntent, step.raw);
      return null;
    }
    let intent: ExportIntent;
    let raw: string;
    let entries: [string, string[]][];
    if (step.kind === 'redo') {
      ({ intent } = step);
      raw = rawIntent!;
      entries = await redis.xrange(usageKeys.records, `(${intent.after}`, intent.last);
    } else {
      entries = await redis.xrange(usageKeys.records, `(${step.after}`, '+', 'COUNT', this.o.batchRecords);
      if (entries.length === 0) return null;
      intent = { after: step.after, last: entries[entries.length - 1][0] };
      raw = encodeIntent(intent);
      if ((await evalScript(redis, INTEND, 2, usageKeys.exportCursor, usageKeys.exportIntent, step.after, raw)) !== 1) return null;
    }
    const records = entries.flatMap(([id, fields]) => {
      const r = toStreamRecord(id, fields[1] ?? '');
      if (!r) this.log.warn({ streamId: id }, 'a usage stream entry is not a usage record: left out of the export');
      return r ? [r] : [];
    });
    const written = await this.writeGroups([...partition(records)]);
    return { intent, raw, entries: entries.length, written };
  }

  /** Step 3: true if this batch's intent was still the one recorded, and is now committed. */
  async commit(batch: PreparedBatch): Promise<boolean> {
    const done = await evalScript(this.o.redis, COMMIT, 3, usageKeys.exportCursor, usageKeys.exportIntent, usageKeys.records, batch.raw, batch.intent.last);
    return done === 1;
  }

  private async writeGroups(groups: [string, StreamRecord[]][]): Promise<string[]> {
    const written: string[] = [];
    let next = 0;
    const worker = async () => {
      while (next < groups.length) {
        const [prefix, group] = groups[next++];
        const key = await this.writeGroup(prefix, group);
        if (key) written.push(key);
      }
    };
    await Promise.all(Array.from({ length: Math.min(PARALLEL_WRITES, groups.length) }, worker));
    return written;
  }

  /** A tenant-hour's records not already in a file of that hour whose range overlaps theirs. */
  private async writeGroup(prefix: string, group: StreamRecord[]): Promise<string | null> {
    const files = await listFiles(this.o.store, prefix);
    const held = new Set<string>();
    for (const f of overlapping(files, group[0].streamId, group[group.length - 1].streamId)) for (const id of await fileIds(this.o.store, f.key)) held.add(id);
    const file = fileToWrite(prefix, group, held, new Set(files.map((f) => f.key)));
    if (!file) return null;
    if (held.size) this.log.warn({ key: file.key, skipped: group.length - file.records.length }, 'usage records already exported were left out (a retried batch, or a cursor rolled back)');
    await writeFile(this.o.store, file.key, fileBody(file.records));
    return file.key;
  }

  async close(): Promise<void> {
    this.sync(false);
    await this.loop;
  }
}
