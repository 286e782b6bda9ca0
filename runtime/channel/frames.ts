// The wire between a replica and its user-code process: one pipe each way (no Node IPC, whose
// reader buffers a message of any length), carrying frames of [u8 kind][u32 n][u32 length][bytes].
// A messages frame (n 0) holds a JSON array of the messages one side sent within a tick; a bytes
// frame holds run n's binary body (to the process) or its answer (from it), in a buffer of its
// own so that a tensor view of it is aligned. A run's bytes frame goes before the message that
// names it, on the same pipe, so the reader already has it when the message comes.
import type { Readable, Writable } from 'node:stream';

/** The pipes' file descriptors in the user-code process. */
export const FROM_REPLICA_FD = 3;
export const TO_REPLICA_FD = 4;

export const MESSAGES = 1;
export const BYTES = 2;
export type FrameKind = typeof MESSAGES | typeof BYTES;

/** Largest messages frame the user-code process may send; the packer splits larger sends. */
export const MAX_MESSAGES_FRAME = 1024 * 1024;

const HEADER = 9;
const EMPTY = Buffer.alloc(0);

function writeHeader(into: Buffer, kind: FrameKind, n: number, length: number): void {
  into.writeUInt8(kind, 0);
  into.writeUInt32LE(n >>> 0, 1);
  into.writeUInt32LE(length, 5);
}

function readHeader(from: Buffer, at: number): { kind: FrameKind; n: number; length: number } {
  return { kind: from.readUInt8(at) as FrameKind, n: from.readUInt32LE(at + 1), length: from.readUInt32LE(at + 5) };
}

/** One frame in one write: a header and its bytes apart would cost two system calls, and the reader two wake-ups. */
export function writeFrame(stream: Writable, kind: FrameKind, n: number, bytes: Uint8Array): void {
  const head = Buffer.allocUnsafe(HEADER);
  writeHeader(head, kind, n, bytes.length);
  if (!bytes.length) return void stream.write(head);
  // Gathered into one writev, not copied: a bytes frame may be a tensor of megabytes.
  stream.cork();
  stream.write(head);
  stream.write(bytes);
  stream.uncork();
}

/** A messages frame: the JSON text written behind its header, in one buffer. */
function writeText(stream: Writable, text: string): void {
  const length = Buffer.byteLength(text);
  const frame = Buffer.allocUnsafe(HEADER + length);
  writeHeader(frame, MESSAGES, 0, length);
  frame.write(text, HEADER);
  stream.write(frame);
}

/**
 * Writes messages as few frames as fit within MAX_MESSAGES_FRAME each (a larger message alone in
 * its own: only the replica sends those, and only the replica's reader in the process takes them).
 */
export function writeMessages(stream: Writable, messages: readonly unknown[]): void {
  let parts: string[] = [];
  let size = 2;
  const flush = () => {
    if (parts.length) writeText(stream, `[${parts.join(',')}]`);
    parts = [];
    size = 2;
  };
  for (const m of messages) {
    const json = JSON.stringify(m);
    if (size + json.length + 1 > MAX_MESSAGES_FRAME / 3) flush();
    parts.push(json);
    size += json.length + 1;
  }
  flush();
}

export interface FrameReaderOptions {
  /** Largest frame of each kind taken; a longer one, or another kind, means the sender is broken or hostile. */
  maxBytes: Record<FrameKind, number>;
  /** Why a frame is refused at its header (undefined: read it). */
  accepts?: (kind: FrameKind, n: number, length: number) => string | undefined;
  onFrame: (kind: FrameKind, n: number, bytes: Buffer) => void;
  /** The stream broke a bound: nothing more is read from it. */
  onCorrupt: (why: string) => void;
}

/** Reads frames and hands them on as they complete: a bytes frame in a buffer of its own, a messages frame in place where one chunk holds it whole. */
export class FrameReader {
  private head = EMPTY;
  private frame?: { kind: FrameKind; n: number; bytes: Buffer; at: number };
  private broken = false;

  constructor(
    private readonly stream: Readable,
    private readonly o: FrameReaderOptions,
  ) {
    stream.on('data', (chunk: Buffer) => this.read(chunk));
    stream.on('error', () => {});
  }

  private read(chunk: Buffer): void {
    let at = 0;
    while (!this.broken && at < chunk.length) {
      if (!this.frame) {
        let header: ReturnType<typeof readHeader>;
        if (!this.head.length && chunk.length - at >= HEADER) {
          header = readHeader(chunk, at);
          at += HEADER;
        } else {
          const need = HEADER - this.head.length;
          this.head = Buffer.concat([this.head, chunk.subarray(at, at + need)]);
          at += Math.min(need, chunk.length - at);
          if (this.head.length < HEADER) return;
          header = readHeader(this.head, 0);
          this.head = EMPTY;
        }
        const { kind, n, length } = header;
        const max = this.o.maxBytes[kind];
        if (max === undefined) return this.corrupt(`sent a frame of unknown kind ${kind}`);
        if (length > max) return this.corrupt(`sent a frame of ${length} bytes, over its bound of ${max}`);
        const refused = this.o.accepts?.(kind, n, length);
        if (refused) return this.corrupt(refused);
        // A messages frame read whole from this chunk is handed on in place: it is parsed at
        // once. A bytes frame gets a buffer of its own (aligned for a tensor view).
        if (kind === MESSAGES && chunk.length - at >= length) {
          at += length;
          this.o.onFrame(kind, n, chunk.subarray(at - length, at));
          continue;
        }
        this.frame = { kind, n, bytes: Buffer.allocUnsafeSlow(length), at: 0 };
      }
      const f = this.frame;
      const take = Math.min(f.bytes.length - f.at, chunk.length - at);
      chunk.copy(f.bytes, f.at, at, at + take);
      f.at += take;
      at += take;
      if (f.at === f.bytes.length) {
        this.frame = undefined;
        this.o.onFrame(f.kind, f.n, f.bytes);
      }
    }
  }

  /** Reads nothing more (the sender broke a bound, or its process is being stopped). */
  corrupt(why: string): void {
    if (this.broken) return;
    this.broken = true;
    this.frame = undefined;
    this.stream.pause();
    this.o.onCorrupt(why);
  }
}
