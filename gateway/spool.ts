// A request body of unknown or large size goes to a temporary file as it streams, counted on the
// way, so the gateway never holds it whole in memory (a model, a JSONL batch sent chunked); S3
// then gets it from the file with its length known.
import { createReadStream, createWriteStream } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Readable, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { ReadableStream as WebReadableStream } from 'node:stream/web';
import type { ObjectStore } from '../core/s3.ts';
import { ApiError } from './errors.ts';

export interface Spooled {
  file: string;
  bytes: number;
  /** Removes the file (and its folder). */
  dispose(): Promise<void>;
}

/**
 * Streams `body` to a temporary file. Past `maxBytes` it stops with `tooLarge()` (a 413) and
 * keeps nothing; `onChunk` sees every chunk (a hash). A full disk is a 507 that says where.
 */
export async function spoolBody(body: ReadableStream<Uint8Array>, o: { maxBytes: number; tooLarge: () => ApiError; onChunk?: (chunk: Buffer) => void; what: string }): Promise<Spooled> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'embers-upload-'));
  const dispose = () => rm(dir, { recursive: true, force: true });
  const file = path.join(dir, 'body');
  let bytes = 0;
  const meter = new Transform({
    transform(chunk: Buffer, _enc, done) {
      bytes += chunk.length;
      if (bytes > o.maxBytes) return done(o.tooLarge());
      o.onChunk?.(chunk);
      done(null, chunk);
    },
  });
  try {
    await pipeline(Readable.fromWeb(body as WebReadableStream), meter, createWriteStream(file)).catch((err: NodeJS.ErrnoException) => {
      if (err.code === 'ENOSPC') throw new ApiError(507, 'insufficient_storage', `the gateway's temporary folder (${os.tmpdir()}) is full; free space there or send a smaller ${o.what}`);
      throw err;
    });
  } catch (err) {
    await dispose();
    throw err;
  }
  return { file, bytes, dispose };
}

/**
 * Stores a request body at `key`: straight to S3 when it declares its length (`declared`; NaN
 * when it does not), else through a temporary file, so S3 gets it with its length known. An
 * empty body is refused with `empty()`. Resolves with its size.
 */
export async function storeBody(store: ObjectStore, key: string, body: ReadableStream<Uint8Array> | null, declared: number, o: { maxBytes: number; tooLarge: () => ApiError; empty: () => ApiError; what: string; contentType: string }): Promise<number> {
  if (declared > o.maxBytes) throw o.tooLarge();
  if (declared === 0 || !body) throw o.empty();
  if (Number.isFinite(declared)) {
    await store.put(key, Readable.fromWeb(body as WebReadableStream), o.contentType, declared);
    return declared;
  }
  const spooled = await spoolBody(body, o);
  try {
    if (spooled.bytes === 0) throw o.empty();
    await store.put(key, createReadStream(spooled.file), o.contentType, spooled.bytes);
    return spooled.bytes;
  } finally {
    await spooled.dispose();
  }
}
