// Reading and writing the usage export's objects in the platform bucket: gzip JSONL, one record a
// line, named by the stream ids they span (core/usage-export-plan.ts).
import { gzipSync, createGunzip } from 'node:zlib';
import { createInterface } from 'node:readline';
import type { ObjectStore } from './s3.ts';
import { parseFileKey, type ExportFile } from './usage-export-plan.ts';

export const EXPORT_CONTENT_TYPE = 'application/gzip';

/** The export files of one hour folder (other keys there are ignored). */
export async function listFiles(store: ObjectStore, prefix: string): Promise<ExportFile[]> {
  return (await store.list(prefix)).map(parseFileKey).filter((f): f is ExportFile => f !== null);
}

/** A file's lines, streamed: a month is never held at once. */
export async function* fileLines(store: ObjectStore, key: string): AsyncGenerator<string> {
  const body = await store.stream(key);
  const lines = createInterface({ input: body.pipe(createGunzip()), crlfDelay: Infinity });
  for await (const line of lines) if (line) yield line;
}

/** The request ids a file holds. */
export async function fileIds(store: ObjectStore, key: string): Promise<Set<string>> {
  const ids = new Set<string>();
  for await (const line of fileLines(store, key)) {
    const id = (JSON.parse(line) as { id?: unknown }).id;
    if (typeof id === 'string') ids.add(id);
  }
  return ids;
}

export async function writeFile(store: ObjectStore, key: string, body: string): Promise<void> {
  await store.put(key, gzipSync(body), EXPORT_CONTENT_TYPE);
}
