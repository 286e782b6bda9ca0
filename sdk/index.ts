// The `embers` package: what a handler file imports. Everything here ends up in user bundles,
// so it stays free of Node-only and native imports.
import { z } from 'zod';
import type { Feeds, Tensor } from '../native/tensor.ts';

/** isTensor: whether a value is a Tensor (what a tensors() field holds once parsed). */
export { isTensor, tensor } from '../native/tensor.ts';
export { tensors, tensorSignatureOf, type TensorDeclaration, type TensorsSchema } from './tensors.ts';
export type { Datatype } from '../core/oip/datatypes.ts';
/** zod, re-exported so a function file needs only `embers`: `import { defineFunction, z } from 'embers'`. */
export { z } from 'zod';
export type { Feeds, Tensor, TensorType, TensorData } from '../native/tensor.ts';

/** Dynamic batching for every model of a function, per replica. */
export interface BatchingOptions {
  /**
   * Most rows (sum of dim 0 over gathered calls) in one inference.
   * @default 16
   * @example { maxBatchSize: 32 }
   */
  maxBatchSize?: number;
  /**
   * Longest the oldest gathered call waits for others before the batch runs anyway.
   * @default 4
   */
  maxDelayMs?: number;
}

/** How the scheduler scales the function (enforced from the elasticity release on). */
export interface ScalingOptions {
  /** @default 0 */ minReplicas?: number;
  /** @default 4 */ maxReplicas?: number;
  /**
   * How long a replica stays warm after the function's last request: 'auto' learns it from the
   * function's own idle times (and pre-warms before a predicted arrival), up to 300 s; a number
   * is the longest it may learn. @default 'auto'
   */
  idleTimeoutS?: number | 'auto';
  /** In-flight requests one replica should hold. @default 32 */ targetConcurrency?: number;
}

/** A model as the handler sees it: `run` is batched with concurrent requests. */
export interface ModelHandle {
  readonly inputNames: readonly string[];
  readonly outputNames: readonly string[];
  /** Runs the model; feeds with dim 0 = rows are concatenated with other callers' rows. */
  run(feeds: Feeds): Promise<Record<string, Tensor>>;
}

export interface Logger {
  info(obj: object | string, msg?: string): void;
  warn(obj: object | string, msg?: string): void;
  error(obj: object | string, msg?: string): void;
  debug(obj: object | string, msg?: string): void;
}

export interface SetupContext<M extends string = string> {
  readonly models: Record<M, ModelHandle>;
  readonly log: Logger;
  /** Function name and version this replica serves. */
  readonly fn: { readonly name: string; readonly version: string };
  /**
   * The function's `vars` and its secrets (`embers secrets put`), by name; a secret wins over a
   * var of the same name. Read-only; a name that is neither is undefined.
   * @example const client = new Api(ctx.env.API_KEY!)
   */
  readonly env: Readonly<Record<string, string | undefined>>;
}

export interface HandlerContext<M extends string = string> extends SetupContext<M> {
  /** The request id, also in every log line the handler writes through `log`. */
  readonly requestId: string;
  /** Aborted when the request times out, is canceled, or its sync caller goes away: stop work early. */
  readonly signal: AbortSignal;
  /**
   * Runs another of the tenant's functions through the platform (queued, scaled, batched and
   * metered as its own) and resolves with its output; a failure throws a HandlerError with the
   * callee's status and code. The callee gets what is left of this request's time, and is
   * stopped when this request ends or `o.signal` aborts. Give the callee's definition as a type
   * argument (its file's default export, imported with `import type`) for typed input and output.
   * @example const { boxes } = await ctx.call<typeof OcrDet>('ocr-det', { image })
   */
  call<F = unknown>(name: string, input: CallInput<F>, o?: CallOptions): Promise<CallOutput<F>>;
  /** ctx.call for a callee that yields: its chunks, as they come. */
  stream<F = unknown>(name: string, input: CallInput<F>, o?: CallOptions): AsyncIterable<CallChunk<F>>;
}

export interface CallOptions {
  /** Stops the call (and the callee, through its ctx.signal) when aborted. */
  signal?: AbortSignal;
  /** Longest wait for the answer, within what is left of this request's time. */
  timeoutMs?: number;
}

/** A callee's input: its schema's input when `F` is a function definition's type, else any JSON. */
export type CallInput<F> = F extends FunctionDefinition<infer S, string, unknown> ? z.input<S> : unknown;
/** A callee's output, from its handler's return type when `F` is a function definition's type. */
export type CallOutput<F> = F extends { handler: (...args: never[]) => infer R } ? (Awaited<R> extends AsyncIterable<unknown> ? unknown[] : Awaited<R>) : unknown;
/** What a yielding callee yields. */
export type CallChunk<F> = F extends { handler: (...args: never[]) => infer R } ? (Awaited<R> extends AsyncIterable<infer C> ? C : unknown) : unknown;

/**
 * A schema for a field that takes bytes: a binary request body (`binaryInput`) arrives as a
 * Uint8Array (a Node Buffer).
 * @example input: z.object({ image: z.union([z.string().min(1), bytes()]) }), binaryInput: 'image'
 */
export function bytes(): z.ZodType<Uint8Array> {
  return z.instanceof(Uint8Array, { message: 'expected bytes (a binary request body)' });
}

const BINARY_BRAND = Symbol.for('embers.binary');

/** A handler's answer as bytes (binary()): the response body itself, with its Content-Type. */
export interface BinaryResult {
  readonly [BINARY_BRAND]: true;
  readonly bytes: Uint8Array;
  readonly contentType: string;
}

/** `type/subtype` (RFC 9110's token characters), parameters allowed in printable ASCII (what a header may carry). */
const MEDIA_TYPE = /^[\w!#$%&'*+.^`|~-]+\/[\w!#$%&'*+.^`|~-]+(?:[ \t]*;[\t\x20-\x7e]*)?$/;

/**
 * Answers with these bytes as the response body and this Content-Type, instead of JSON: an image,
 * audio, a tensor's raw bytes. A handler that returns a bare Uint8Array (or Buffer) answers the
 * same way as `application/octet-stream`. Async jobs and batch lines, which are JSON, carry it
 * as `{ "contentType": …, "base64": … }`.
 * @example return binary(await sharp(mask).png().toBuffer(), 'image/png')
 */
export function binary(data: Uint8Array | ArrayBuffer, contentType = 'application/octet-stream'): BinaryResult {
  if (!(data instanceof Uint8Array) && !(data instanceof ArrayBuffer)) throw new TypeError(`binary() takes a Uint8Array, Buffer or ArrayBuffer, not ${data === null ? 'null' : typeof data}`);
  if (typeof contentType !== 'string' || !MEDIA_TYPE.test(contentType)) throw new TypeError(`binary(): content type ${JSON.stringify(contentType)} is not a media type like image/png`);
  return { [BINARY_BRAND]: true, bytes: data instanceof ArrayBuffer ? new Uint8Array(data) : data, contentType };
}

/** The bytes and Content-Type a handler's result answers with, when it answers with bytes (binary(), a Uint8Array, an ArrayBuffer). */
export function binaryOf(result: unknown): { bytes: Uint8Array; contentType: string } | undefined {
  if (result instanceof Uint8Array || result instanceof ArrayBuffer) return binary(result);
  if (typeof result !== 'object' || result === null || (result as Record<symbol, unknown>)[BINARY_BRAND] !== true) return undefined;
  const { bytes, contentType } = result as BinaryResult;
  return bytes instanceof Uint8Array && typeof contentType === 'string' ? { bytes, contentType } : undefined;
}

export class HandlerError extends Error {
  /**
   * Throw from a handler to answer with a 4xx the caller can act on.
   * @example throw new HandlerError(400, 'image is not a PNG or JPEG')
   */
  constructor(
    /** 400, 404, 409, 413 or 422 from a handler; a failed `ctx.call` carries its callee's status. */
    readonly status: 400 | 404 | 409 | 413 | 422 | (number & {}),
    message: string,
    readonly code = 'invalid_input',
  ) {
    super(message);
    this.name = 'HandlerError';
    Object.defineProperty(this, HANDLER_ERROR_BRAND, { value: true });
  }

  /**
   * `err instanceof HandlerError` holds for one made by any copy of this module: a function's
   * bundle has its own, and the errors `ctx.call` throws come from the platform's.
   */
  static [Symbol.hasInstance](this: unknown, value: unknown): boolean {
    // A subclass (class NotFound extends HandlerError) keeps the ordinary check.
    if (this !== HandlerError) return Function.prototype[Symbol.hasInstance].call(this, value);
    return typeof value === 'object' && value !== null && (value as Record<symbol, unknown>)[HANDLER_ERROR_BRAND] === true;
  }
}

const HANDLER_ERROR_BRAND = Symbol.for('embers.handler-error');

export interface FunctionOptions<S extends z.ZodType, M extends string, O> {
  /**
   * URL-safe name: lower-case letters, digits and '-', 1-63 chars. The endpoint is /v1/run/<name>.
   * @example 'ocr'
   */
  name: string;
  /**
   * Models by handle name: `s3://bucket/key`, a path relative to this file, or a path inside an
   * installed package (`pkg/dir/model.onnx`). Local files are uploaded on deploy.
   * @default {}
   * @example { det: 's3://models/ppocr/det.onnx' }
   */
  models?: Record<M, string>;
  /**
   * zod schema of the request body; invalid input is answered with 400 before the handler runs.
   * @default z.unknown(): any JSON
   */
  input?: S;
  /**
   * The input field a binary request body fills: a request whose Content-Type is not JSON (say
   * `image/png`) arrives as `{ [binaryInput]: <the body's bytes, a Uint8Array> }`, with no base64
   * and no JSON on the way. The field's schema must accept a Uint8Array (`bytes()`), and may
   * accept a base64 string too for JSON callers. Unset: every body is parsed as JSON.
   * @example binaryInput: 'image'
   */
  binaryInput?: string;
  /**
   * Plain settings, read as `ctx.env.NAME`: kept in the manifest and shown by `embers functions
   * show`, so never for credentials (`embers secrets put <fn> NAME` keeps those, sealed). Names
   * are upper-case letters, digits and "_"; values strings of at most 4096 characters.
   * @default {}
   * @example vars: { MODE: 'fast', UPSTREAM_URL: 'https://api.example.com' }
   */
  vars?: Record<string, string>;
  /** @default { maxBatchSize: 16, maxDelayMs: 4 } */
  batching?: BatchingOptions;
  /** @default { minReplicas: 0, maxReplicas: 4, idleTimeoutS: 'auto', targetConcurrency: 32 } */
  scaling?: ScalingOptions;
  /** A request running longer is answered 504 and its signal aborted. @default 30000 */
  timeoutMs?: number;
  /**
   * What each request of this version is charged, per request and per compute-second (handler
   * wall time), in its usage record: `embers usage`, invoices and budgets count it. A version
   * deployed with new prices charges them from then on.
   * @default the platform's EMBERS_PRICE_PER_REQUEST / EMBERS_PRICE_PER_COMPUTE_SECOND
   * @example pricing: { perRequest: 0.0001, perComputeSecond: 0.00002 }
   */
  pricing?: { perRequest?: number; perComputeSecond?: number };
  /**
   * Most live requests waiting in the queue; more are refused with 429 (Triton's max_queue_size).
   * @default 10000
   */
  maxQueueLength?: number;
  /**
   * An example input run once through the handler before the replica takes requests, so the
   * first caller does not pay first-inference costs (the cold start's `warmup` phase).
   * @example warmup: { text: 'hello' }
   */
  warmup?: z.input<S> | (() => z.input<S> | Promise<z.input<S>>);
  /** Runs once per replica, after models load and before it takes requests. */
  setup?: (ctx: SetupContext<M>) => Promise<void> | void;
  /**
   * Runs once per request; its result is sent as JSON (typed arrays as arrays of numbers, bytes
   * nested in it as base64 strings), or as bytes when it returns binary() or a Uint8Array. An
   * async generator (or a handler returning an async iterable) streams: each value it yields is
   * a chunk, sent as it comes to a caller reading events, and gathered into an array for others.
   * @example async *handler({ prompt }, ctx) { for await (const token of generate(prompt, ctx.signal)) yield { token }; }
   */
  handler: (input: z.infer<S>, ctx: HandlerContext<M>) => Promise<O> | O;
}

export interface FunctionDefinition<S extends z.ZodType = z.ZodType, M extends string = string, O = unknown>
  extends Omit<FunctionOptions<S, M, O>, 'input'> {
  /** The input schema; `z.unknown()` where the options gave none. */
  readonly input: S;
  readonly [FUNCTION_BRAND]: true;
}

export const FUNCTION_BRAND = Symbol.for('embers.function');

/**
 * Declares an Embers function. The default export of a function file.
 * @example
 * export default defineFunction({
 *   name: 'echo',
 *   input: z.object({ message: z.string() }),
 *   handler: (input) => input,
 * })
 */
export function defineFunction<S extends z.ZodType = z.ZodUnknown, M extends string = never, O = unknown>(
  options: FunctionOptions<S, M, O>,
): FunctionDefinition<S, M, O> {
  return Object.assign(Object.create(null), options, { input: options.input ?? z.unknown(), [FUNCTION_BRAND]: true as const });
}

export function isFunctionDefinition(value: unknown): value is FunctionDefinition {
  return typeof value === 'object' && value !== null && (value as Record<symbol, unknown>)[FUNCTION_BRAND] === true;
}
