// A streamed answer's chunks in Redis: one stream per request (keys.chunks), each entry one
// chunk's JSON text, its id `0-<seq>` its sequence number (1, 2, …), which is also its SSE event
// id. The replica adds them as its user code yields them (runtime/replica/chunk-sink.ts); a gateway reads
// them at its caller's pace (gateway/chunk-reader.ts). A sync run's gateway removes what it has
// read, so the stream's length is what is unread, and the replica stops granting its user code
// more past UNREAD_MAX: nothing buffers without bound, whatever the reader's pace. An async job's
// chunks are kept, within KEPT_CHUNKS and KEPT_CHUNK_BYTES, for GET /v1/jobs/:id/events to replay.
import type { Redis } from 'ioredis';
import { keys } from './keys.ts';
import { lua } from './lua.ts';
import { evalScript } from './redis.ts';

export { MAX_CHUNK_BYTES, SEND_WINDOW } from './chunk-limits.ts';
/** Chunks of a sync run its gateway may leave unread before the replica grants no more credit. */
export const UNREAD_MAX = 32;
/** What an async job keeps of its chunks: the latest this many, within this many bytes. */
export const KEPT_CHUNKS = 1000;
export const KEPT_CHUNK_BYTES = 4 * 1024 * 1024;

export interface Chunk {
  seq: number;
  /** The chunk's JSON text. */
  data: string;
}

const ADD = lua('chunks-add');

/**
 * Adds chunks to request `id`'s stream (CHUNKS_ADD), keeping them for a job (`kept`) or leaving
 * them to the gateway that reads and removes them. Resolves with the last one's sequence number
 * and the stream's length.
 */
export async function addChunks(redis: Redis, id: string, data: string[], o: { kept: boolean; ttlMs: number }): Promise<{ last: number; length: number }> {
  const [last, length] = (await evalScript(redis, ADD, 2, keys.chunks(id), keys.chunkBytes(id), Math.max(1, Math.ceil(o.ttlMs)), o.kept ? KEPT_CHUNKS : 0, KEPT_CHUNK_BYTES, keys.chunksChannel(id), ...data)) as [string, number];
  return { last: seqOf(last), length };
}

/**
 * Up to `count` chunks after sequence number `after`. `consume`: those up to `after` are removed
 * first, in the same round trip (a sync run's gateway has passed them on to its caller).
 */
export async function readChunks(redis: Redis, id: string, after: number, count: number, consume = false): Promise<Chunk[]> {
  const key = keys.chunks(id);
  const pipe = redis.pipeline();
  if (consume && after > 0) pipe.xtrim(key, 'MINID', `0-${after + 1}`);
  pipe.xrange(key, `(0-${after}`, '+', 'COUNT', count);
  const res = (await pipe.exec()) ?? [];
  const [err, entries] = res[res.length - 1] ?? [];
  if (err) throw err;
  return ((entries ?? []) as [string, string[]][]).map(([entry, fields]) => ({ seq: seqOf(entry), data: fields[1] ?? 'null' }));
}

/** Removes a request's chunks (a sync run's, once its caller has them or is gone). */
export async function dropChunks(redis: Redis, id: string): Promise<void> {
  await redis.del(keys.chunks(id), keys.chunkBytes(id));
}

/** A chunk entry's sequence number, from its id `0-<seq>`. */
export const seqOf = (entry: string): number => Number(entry.slice(entry.indexOf('-') + 1)) || 0;

/**
 * The sequence number a reader resumes after, from an SSE `Last-Event-ID` (absent: 0, from the
 * start); undefined when it is not one this API gave out.
 */
export function resumeAfter(lastEventId: string | undefined): number | undefined {
  if (lastEventId === undefined || lastEventId.trim() === '') return 0;
  const t = lastEventId.trim();
  return /^\d{1,15}$/.test(t) ? Number(t) : undefined;
}
