// How a handler's result becomes its answer: JSON, or bytes with their own Content-Type.
import { binaryOf } from '../../sdk/index.ts';
import type { InferenceDescriptor } from '../../core/oip/request.ts';
import { encodeResponse, outputTensors } from '../../core/oip/tensors.ts';

/** Bytes a handler answered with, and their Content-Type. */
export interface BinaryBody {
  bytes: Buffer;
  contentType: string;
  /** An inference response with binary tensors: the length of its JSON header. */
  headerLength?: number;
}

/** A handler's answer: the JSON text, or the bytes. */
export type ResultBody = { json: string; binary?: undefined } | { json?: undefined; binary: BinaryBody };

/** Set only while resultBody writes a result: the toJSON below leave every other JSON.stringify as Node has it. */
let writingResult = false;

/**
 * JSON has no typed arrays and no bytes. Left alone, JSON.stringify writes a Float32Array as
 * `{"0":0.5,"1":…}` and a Buffer as `{"type":"Buffer","data":[…]}`. In a result, a typed array
 * is written as an array of numbers (an embedding, a tensor's data; 64-bit integers as numbers
 * while they are exact, as strings beyond 2^53) and bytes (Uint8Array, Buffer) as a base64
 * string, as JSON APIs carry images. Done with `toJSON` on the prototypes rather than a
 * replacer, because JSON.stringify looks up `toJSON` on every object anyway, while a replacer
 * is a call per value (`echo`'s hot path); they act only inside resultBody, so a handler's own
 * JSON.stringify and its libraries' see Node's behaviour. Idempotent.
 */
export function writeTypedArraysAsJson(): void {
  const typedArray = Object.getPrototypeOf(Uint8Array.prototype) as object;
  if (Object.hasOwn(typedArray, 'toJSON')) return;
  const define = (proto: object, toJSON: (this: never, key: string) => unknown) =>
    Object.defineProperty(proto, 'toJSON', { value: toJSON, writable: true, configurable: true, enumerable: false });
  define(typedArray, function (this: ArrayLike<number> | BigInt64Array | BigUint64Array) {
    if (!writingResult) return this;
    if (!(this instanceof BigInt64Array || this instanceof BigUint64Array)) return Array.from(this);
    return Array.from(this, (v: bigint) => (v <= Number.MAX_SAFE_INTEGER && v >= Number.MIN_SAFE_INTEGER ? Number(v) : String(v)));
  });
  const nodeBufferToJSON = Buffer.prototype.toJSON;
  define(Uint8Array.prototype, function (this: Uint8Array) {
    return writingResult ? Buffer.from(this.buffer, this.byteOffset, this.byteLength).toString('base64') : this;
  });
  define(Buffer.prototype, function (this: Buffer) {
    return writingResult ? this.toString('base64') : nodeBufferToJSON.call(this);
  });
}

/** A result over the answer limit (EMBERS_MAX_ANSWER_BYTES): answered 500 `answer_too_large`. */
export class AnswerTooLargeError extends Error {
  override name = 'AnswerTooLargeError';
  constructor(
    readonly bytes: number,
    readonly max: number,
  ) {
    super(`answered ${bytes} bytes, over the ${max} this platform passes back (EMBERS_MAX_ANSWER_BYTES); write large results to S3 and answer with their location`);
  }
}

/**
 * The answer to `result`: bytes when the handler returned binary() or a Uint8Array, JSON
 * otherwise. Throws AnswerTooLargeError past `maxBytes` (answers cross Redis pub/sub).
 */
export function resultBody(result: unknown, maxBytes: number): ResultBody {
  const bin = binaryOf(result);
  if (bin) {
    const { bytes, contentType } = bin;
    if (bytes.length > maxBytes) throw new AnswerTooLargeError(bytes.length, maxBytes);
    return { binary: { bytes: Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength), contentType } };
  }
  let json: string | undefined;
  writingResult = true;
  try {
    json = JSON.stringify(result ?? null);
  } catch (err) {
    throw new Error(`its result cannot be written as JSON (${(err as Error).message}); return plain values, or bytes with binary()`);
  } finally {
    writingResult = false;
  }
  // A function or a symbol (or a toJSON that gives undefined) writes nothing at all.
  if (json === undefined) throw new Error(`its result cannot be written as JSON (a ${typeof result}); return plain values, or bytes with binary()`);
  // (UTF-8 takes at most 3 bytes per UTF-16 unit: most answers need no count.)
  if (json.length * 3 > maxBytes) {
    const size = Buffer.byteLength(json);
    if (size > maxBytes) throw new AnswerTooLargeError(size, maxBytes);
  }
  return { json };
}

/**
 * The answer to an inference request (core/oip/request.ts): the protocol's response for the
 * outputs the handler returned, JSON alone or with binary tensors after its header.
 */
export function inferenceResultBody(result: unknown, d: InferenceDescriptor, model: { name: string; version: string }, maxBytes: number): ResultBody {
  const { body, headerLength } = encodeResponse(outputTensors(result), d, model);
  if (body.length > maxBytes) throw new AnswerTooLargeError(body.length, maxBytes);
  return { binary: { bytes: body, contentType: headerLength === undefined ? 'application/json' : 'application/octet-stream', headerLength } };
}

/** A binary answer where only JSON goes (an async job's record, a batch's output line). */
export function binaryAsJson(b: BinaryBody): string {
  return JSON.stringify({ contentType: b.contentType, base64: b.bytes.toString('base64') });
}

/** A chunk over MAX_CHUNK_BYTES (core/chunks.ts): the run ends 500 `answer_too_large`. */
export class ChunkTooLargeError extends AnswerTooLargeError {
  constructor(bytes: number, max: number) {
    super(bytes, max);
    this.message = `yielded a chunk of ${bytes} bytes, over the ${max} one chunk may hold; yield smaller chunks`;
  }
}

/**
 * A chunk a handler yielded, as JSON: as a result is written, with bytes (binary(), a
 * Uint8Array) as `{ contentType, base64 }`, since a chunk always travels as JSON. Throws
 * ChunkTooLargeError past `maxBytes`.
 */
export function chunkJson(value: unknown, maxBytes: number): string {
  let body: ResultBody;
  try {
    body = resultBody(value, maxBytes);
  } catch (err) {
    if (err instanceof AnswerTooLargeError) throw new ChunkTooLargeError(err.bytes, maxBytes);
    throw err;
  }
  const json = body.binary ? binaryAsJson(body.binary) : body.json;
  // base64 grows bytes by a third; JSON text is counted in bytes only when it could be over.
  if (json.length > maxBytes / 3 && Buffer.byteLength(json) > maxBytes) throw new ChunkTooLargeError(Buffer.byteLength(json), maxBytes);
  return json;
}
