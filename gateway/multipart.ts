// A multipart/form-data upload (what OpenAI's clients send to the Files API) read as it streams:
// the one file part goes to a temporary file, counted on the way, and the small text fields are
// kept. Nothing is held whole in memory, as with spool.ts.
import { mkdtemp, open, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { ApiError } from './errors.ts';
import type { Spooled } from './spool.ts';

export interface MultipartUpload {
  /** The file part, spooled; dispose() it. */
  file: Spooled;
  filename?: string;
  /** The text fields, by name. */
  fields: Record<string, string>;
}

const CRLF = Buffer.from('\r\n');
const HEADERS_END = Buffer.from('\r\n\r\n');
/** Largest header block of a part, and most bytes of text fields, before the form is refused. */
const MAX_HEADERS = 16 * 1024;
const MAX_FIELDS = 64 * 1024;

const bad = (message: string) => new ApiError(400, 'invalid_multipart', message);

/**
 * Reads a multipart/form-data body whose file is the part named `fileField`. Past `maxBytes` of
 * file it stops with `tooLarge()` and keeps nothing. A body that is not such a form is a 400.
 */
export async function spoolMultipart(body: ReadableStream<Uint8Array>, contentType: string, o: { fileField: string; maxBytes: number; tooLarge: () => ApiError }): Promise<MultipartUpload> {
  const boundary = /boundary=(?:"([^"]{1,70})"|([^;\s]{1,70}))/i.exec(contentType);
  if (!boundary) throw bad('a multipart/form-data body needs a boundary in its Content-Type');
  const delimiter = Buffer.from(`\r\n--${boundary[1] ?? boundary[2]}`);
  const dir = await mkdtemp(path.join(os.tmpdir(), 'embers-upload-'));
  const dispose = () => rm(dir, { recursive: true, force: true });
  const file = path.join(dir, 'body');
  const out = await open(file, 'w');
  const fields: Record<string, string> = {};
  let filename: string | undefined;
  let fileBytes = 0;
  let fieldBytes = 0;
  let sawFile = false;
  // The part being read: null in the preamble; `file` for the file part, else a field's name.
  let part: { file: true } | { field: string; chunks: Buffer[] } | { skip: true } | null = null;
  let state: 'body' | 'boundary' | 'headers' = 'body';
  let done = false;
  // A CRLF in front, so the first boundary matches the delimiter as every later one does.
  let buf: Buffer = Buffer.from(CRLF);

  const emit = async (data: Buffer) => {
    if (!part || data.length === 0 || 'skip' in part) return;
    if ('file' in part) {
      fileBytes += data.length;
      if (fileBytes > o.maxBytes) throw o.tooLarge();
      for (let at = 0; at < data.length; ) at += (await out.write(data, at)).bytesWritten;
      return;
    }
    fieldBytes += data.length;
    if (fieldBytes > MAX_FIELDS) throw bad(`the form's text fields are over ${MAX_FIELDS} bytes`);
    part.chunks.push(Buffer.from(data));
  };

  const startPart = (headerText: string) => {
    const disposition = /^content-disposition:(.*)$/im.exec(headerText)?.[1] ?? '';
    const name = /\bname="([^"]*)"/i.exec(disposition)?.[1];
    const partFilename = /\bfilename="([^"]*)"/i.exec(disposition)?.[1];
    if (name === o.fileField) {
      if (sawFile) throw bad(`the form has more than one "${o.fileField}" part`);
      sawFile = true;
      filename = partFilename;
      part = { file: true };
    } else if (name !== undefined && partFilename === undefined) {
      part = { field: name, chunks: [] };
    } else {
      part = { skip: true };
    }
  };

  const endPart = () => {
    if (part && 'field' in part) fields[part.field] = Buffer.concat(part.chunks).toString('utf8');
    part = null;
  };

  /** Consumes what `buf` holds as far as it can (the rest waits for the next chunk); true once the form has ended. */
  const drain = async (): Promise<boolean> => {
    for (;;) {
      if (state === 'body') {
        const at = buf.indexOf(delimiter);
        if (at < 0) {
          // Keep a tail that could be the start of a delimiter split across chunks.
          const keep = Math.min(buf.length, delimiter.length - 1);
          await emit(buf.subarray(0, buf.length - keep));
          buf = buf.subarray(buf.length - keep);
          return false;
        }
        await emit(buf.subarray(0, at));
        endPart();
        buf = buf.subarray(at + delimiter.length);
        state = 'boundary';
      }
      if (state === 'boundary') {
        if (buf.length < 2) return false;
        if (buf[0] === 0x2d && buf[1] === 0x2d) return true;
        // The boundary line ends at its CRLF (after optional padding); the CRLF stays, so a part
        // without headers is CRLF CRLF like any other.
        const eol = buf.indexOf(CRLF);
        if (eol < 0) {
          if (buf.length > 256) throw bad('a boundary line of the form does not end');
          return false;
        }
        buf = buf.subarray(eol);
        state = 'headers';
      }
      if (state === 'headers') {
        const end = buf.indexOf(HEADERS_END);
        if (end < 0) {
          if (buf.length > MAX_HEADERS) throw bad(`a part's headers are over ${MAX_HEADERS} bytes`);
          return false;
        }
        startPart(buf.subarray(2, end).toString('utf8'));
        buf = buf.subarray(end + HEADERS_END.length);
        state = 'body';
      }
    }
  };

  try {
    try {
      for await (const chunk of body as unknown as AsyncIterable<Uint8Array>) {
        buf = buf.length ? Buffer.concat([buf, chunk]) : Buffer.from(chunk);
        // The epilogue after the closing boundary carries nothing: left unread.
        if ((done = await drain())) break;
      }
    } finally {
      await out.close();
    }
    if (!done) throw bad('the multipart body ends before its closing boundary');
    if (!sawFile) throw bad(`send the file as the form's "${o.fileField}" part`);
  } catch (err) {
    await dispose();
    if ((err as NodeJS.ErrnoException).code === 'ENOSPC') throw new ApiError(507, 'insufficient_storage', `the gateway's temporary folder (${os.tmpdir()}) is full; free space there or send a smaller file`);
    throw err;
  }
  return { file: { file, bytes: fileBytes, dispose }, filename, fields };
}
