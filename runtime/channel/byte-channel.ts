// Bytes between a replica and its user-code process, beside their JSON channel: one pipe each
// way carrying frames of [u32 request number][u32 length][bytes]. A binary body or answer (an
// image, a tensor) crosses once, into one buffer of its own (so a tensor view of it is aligned),
// where the JSON channel would carry it as base64 and parse it as a string. The JSON message
// of the same request says how many bytes to wait for; whichever arrives first waits for the other.
import type { Readable, Writable } from 'node:stream';

/** The file descriptors of the pipes in the user-code process: fd 3 is Node's IPC channel. */
export const BYTES_IN_FD = 4;
export const BYTES_OUT_FD = 5;

const HEADER = 8;

export function writeFrame(stream: Writable, n: number, bytes: Uint8Array): void {
  const head = Buffer.allocUnsafe(HEADER);
  head.writeUInt32LE(n >>> 0, 0);
  head.writeUInt32LE(bytes.length, 4);
  stream.write(head);
  if (bytes.length) stream.write(bytes);
}

export interface FrameReaderOptions {
  /** Largest frame taken; a longer one means the sender is broken or hostile. */
  maxBytes: number;
  /** Most frames held that nobody asked for yet. */
  maxHeld: number;
  /** The stream broke a limit: nothing more is read from it. */
  onCorrupt: (why: string) => void;
}

/** Reads frames and hands each to whoever takes its request number. */
export class FrameReader {
  private readonly held = new Map<number, Buffer>();
  private readonly takers = new Map<number, (b: Buffer) => void>();
  private head = Buffer.alloc(0);
  private frame?: { n: number; bytes: Buffer; at: number };
  private broken = false;

  constructor(stream: Readable, private readonly o: FrameReaderOptions) {
    stream.on('data', (chunk: Buffer) => this.read(chunk));
    stream.on('error', () => {});
  }

  /** The bytes of request `n`: at once if they came, else when they do. */
  take(n: number): Promise<Buffer> {
    const ready = this.held.get(n);
    if (ready) {
      this.held.delete(n);
      return Promise.resolve(ready);
    }
    return new Promise((resolve) => this.takers.set(n, resolve));
  }

  /** Forgets request `n` (its process exited, or it was answered without its bytes). */
  drop(n: number): void {
    this.held.delete(n);
    this.takers.delete(n);
  }

  private read(chunk: Buffer): void {
    let at = 0;
    while (!this.broken && at < chunk.length) {
      if (!this.frame) {
        const need = HEADER - this.head.length;
        this.head = Buffer.concat([this.head, chunk.subarray(at, at + need)]);
        at += Math.min(need, chunk.length - at);
        if (this.head.length < HEADER) return;
        const n = this.head.readUInt32LE(0);
        const length = this.head.readUInt32LE(4);
        this.head = Buffer.alloc(0);
        if (length > this.o.maxBytes) return this.corrupt(`a frame of ${length} bytes, over ${this.o.maxBytes}`);
        this.frame = { n, bytes: Buffer.allocUnsafeSlow(length), at: 0 };
      }
      const f = this.frame;
      const take = Math.min(f.bytes.length - f.at, chunk.length - at);
      chunk.copy(f.bytes, f.at, at, at + take);
      f.at += take;
      at += take;
      if (f.at === f.bytes.length) {
        this.frame = undefined;
        this.deliver(f.n, f.bytes);
      }
    }
  }

  private deliver(n: number, bytes: Buffer): void {
    const taker = this.takers.get(n);
    if (taker) {
      this.takers.delete(n);
      taker(bytes);
      return;
    }
    if (this.held.size >= this.o.maxHeld) return this.corrupt(`${this.held.size} frames that no request asked for`);
    this.held.set(n, bytes);
  }

  private corrupt(why: string): void {
    this.broken = true;
    this.held.clear();
    this.o.onCorrupt(why);
  }
}
