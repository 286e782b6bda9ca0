// The contracts between gateway, runtime and scheduler: names, records and messages.
// Keep them stable: gateways, agents and replicas of one deployment read each other's.
import { z } from 'zod';
import { checkS3Uri } from './s3-uri.ts';
import { DEFAULT_TENANT } from './names.ts';
import { TensorSignatureSchema } from './oip/datatypes.ts';
import { VarsSchema } from './function-env.ts';

/** Function names end up in URLs, Redis keys and S3 keys: keep them to a safe alphabet. */
export const FUNCTION_NAME = /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/;
export const FunctionName = z
  .string()
  .regex(FUNCTION_NAME, 'function names are 1-63 lower-case letters, digits or "-", starting and ending with a letter or digit');

export const ModelUri = z.string().superRefine((uri, ctx) => {
  const loc = checkS3Uri(uri);
  if ('problem' in loc) ctx.addIssue({ code: 'custom', message: `model references must be s3://bucket/key after deploy: ${loc.problem}` });
});

export const BatchingSchema = z.object({
  maxBatchSize: z.number().int().min(1).max(4096).default(16),
  maxDelayMs: z.number().min(0).max(10_000).default(4),
});

/** The longest keep-alive `idleTimeoutS: 'auto'` learns. */
export const AUTO_IDLE_BOUND_S = 300;

export const ScalingSchema = z.object({
  minReplicas: z.number().int().min(0).max(1024).default(0),
  maxReplicas: z.number().int().min(1).max(1024).default(4),
  /** 'auto': learned per function (scheduler/keep-alive.ts) up to AUTO_IDLE_BOUND_S; a number: learned up to that bound. */
  idleTimeoutS: z.union([z.number().min(1).max(86_400), z.literal('auto')]).default('auto'),
  targetConcurrency: z.number().int().min(1).default(32),
}).refine((s) => s.minReplicas <= s.maxReplicas, { message: 'scaling.minReplicas must not be above scaling.maxReplicas', path: ['minReplicas'] });

/** What `embers deploy` learns from a bundle and sends with it. */
export const DeploySpecSchema = z.object({
  name: FunctionName,
  models: z.record(z.string().regex(/^[A-Za-z_$][\w$]*$/, 'model handle names must be identifiers'), ModelUri).default({}),
  /** JSON Schema (2020-12) the gateway checks a run's JSON input with; a bare model's is made from its tensors. */
  inputSchema: z.record(z.string(), z.unknown()).default({}),
  batching: BatchingSchema.default({ maxBatchSize: 16, maxDelayMs: 4 }),
  scaling: ScalingSchema.default({ minReplicas: 0, maxReplicas: 4, idleTimeoutS: 'auto', targetConcurrency: 32 }),
  timeoutMs: z.number().int().min(1).max(3_600_000).default(30_000),
  /** Price of a request and of a compute-second (handler wall time), charged in each usage record of this version. Unset: the platform's EMBERS_PRICE_* defaults. */
  pricing: z.object({ perRequest: z.number().min(0).default(0), perComputeSecond: z.number().min(0).default(0) }).optional(),
  /** Most requests waiting in the queue (live ones; batch lines are bounded by the feeder); beyond it, 429. @default 10000 */
  maxQueueLength: z.number().int().min(1).max(10_000_000).default(10_000),
  /** The input field a binary (non-JSON) request body fills; unset: bodies are JSON. */
  binaryInput: z.string().regex(/^[A-Za-z_$][\w$]*$/, 'binaryInput must name an input field (an identifier)').optional(),
  /**
   * A bare model: no bundle, the platform's own handler runs its one model (`models.model`) with
   * dynamic batching (runtime/user-code/model-function.ts). Unset: a handler function.
   */
  kind: z.literal('model').optional(),
  /**
   * The tensors it takes and gives, for the Open Inference Protocol (gateway/routes/inference.ts):
   * a bare model's come from its ONNX graph, a handler's from `tensors()`. Unset: not served there.
   */
  tensors: TensorSignatureSchema.optional(),
  /** Plain settings the handler reads as `ctx.env.NAME` (its secrets over them): shown by `functions show`, never for secrets. */
  vars: VarsSchema.default({}),
});
export type DeploySpec = z.infer<typeof DeploySpecSchema>;

export const DeployRequestSchema = z.object({
  spec: DeploySpecSchema,
  /** The esbuild ESM bundle, base64; none for a bare model (spec.kind 'model'). */
  bundle: z.string().min(1, 'bundle is empty').optional(),
});

/**
 * Whether a run's body is read as JSON, by its Content-Type: none, any type naming JSON
 * (`application/json`, `…+json`, `text/json`), any `text/…`, and curl -d's default
 * (`application/x-www-form-urlencoded`), which JSON callers send unawares. Anything else is
 * bytes, for a function with binaryInput (the gateway; `embers run --binary` refuses the rest).
 */
export function isJsonType(contentType: string | undefined): boolean {
  const type = (contentType ?? '').split(';', 1)[0].trim().toLowerCase();
  return type === '' || type.includes('json') || type.startsWith('text/') || type === 'application/x-www-form-urlencoded';
}

/** An immutable version, as stored in S3 and in the registry. */
export interface Manifest extends DeploySpec {
  version: string;
  createdAt: string;
  bundle: { key: string; sha256: string; bytes: number };
  /** Made by Registry.roll, not a deploy: the version before's bundle and spec, for replicas to start afresh ('secrets': they changed). */
  rolledFor?: 'secrets';
}

/**
 * Job payload on a function's queue: only what the handler needs, plus where the result goes —
 * exactly one of `gw` (a gateway waits on the line), `job` (an async job record) or `batch`
 * (one line of a bulk batch).
 */
export interface RunJobData {
  /** Request id. */
  rid: string;
  /** A sync request's unique id, minted by the gateway: it is metered under it, so a request queued twice (a command resent after a reconnect) is counted once. */
  id?: string;
  /** Gateway id whose reply channel waits for this job (synchronous runs). */
  gw?: string;
  /** Async job id: the result is written to its record (keys.job). */
  job?: string;
  /** Batch item: the batch, the 1-based line of the input file, and the line's custom_id. */
  batch?: { id: string; line: number; cid: string };
  input: unknown;
  /**
   * A binary request body rides next to this data in the stream entry (field `b`, not JSON) and
   * becomes `input[raw]`, a Buffer, when the replica reads the entry.
   */
  raw?: string;
  /**
   * The input is an inference request of the Open Inference Protocol (core/oip/request.ts), its
   * tensors' bytes the binary body (raw names the field they fill).
   */
  tensors?: true;
  /** Set when a replica reads an entry whose binary body (field `b`) or input queued apart is missing: answered 500, not run. */
  bodyMissing?: true;
  /** Enqueue time (ms since epoch) for queue timing. */
  enq: number;
  /** The same moment on the gateway's monotonic clock (ms) and that clock's boot (core/clock.ts): queue time to the µs on one machine. */
  mono?: number;
  boot?: string;
  /** Latest start (ms since epoch) of a synchronous run: still queued then, it is answered 504 without running. */
  deadline?: number;
  /**
   * A sync caller reads the answer as events (Accept: text/event-stream): a handler that yields
   * writes its chunks as they come to the stream keys.chunks(id), which its gateway reads.
   */
  stream?: true;
  /**
   * A call from another function's handler (`ctx.call`, runtime/replica/calls.ts): by when (ms
   * since epoch) its caller needs the answer (its budget ends then if sooner), the caller's
   * request id (in its usage record and tail line), how deep in a chain of calls it is, and
   * whether it rides below live traffic (its caller is a batch line).
   */
  endBy?: number;
  parent?: string;
  depth?: number;
  below?: true;
  /** Metering: the tenant and API key id the request is billed to, and its body size. */
  t?: string;
  k?: string;
  bin?: number;
}

/**
 * Where a request's outcome goes, from the one of RunJobData's `gw`, `job` and `batch` it has: a
 * sync run's reply to its gateway's channel, an async run's job record, or a batch line's output.
 */
export type Destination =
  | { to: 'gateway'; gateway: string; id?: string }
  | { to: 'job'; job: string }
  | { to: 'batch'; line: NonNullable<RunJobData['batch']> };

export function destinationOf(data: RunJobData): Destination | undefined {
  if (data.gw) return { to: 'gateway', gateway: data.gw, id: data.id };
  if (data.job) return { to: 'job', job: data.job };
  if (data.batch) return { to: 'batch', line: data.batch };
  return undefined;
}

/** One line of a batch chunk: what RunJobData's `batch`, `input` and `bin` would hold for it alone. */
export interface BatchChunkLine {
  line: number;
  cid: string;
  input: unknown;
  bin: number;
}

/**
 * A batch-queue job holding several lines of one batch (the feeder cuts them when lines finish
 * fast: scheduler/batch-feeder.ts). The replica runs them side by side, each as the RunJobData
 * it would have had alone, and meters and records each under its own id.
 */
export interface BatchChunkData {
  chunk: { batch: string; lines: BatchChunkLine[] };
  enq: number;
  t?: string;
  k?: string;
}

/** Header of a reply message; the body (result or error JSON, or bytes: `type`) follows after a newline (encodeReply). */
export interface ReplyHeader {
  rid: string;
  /**
   * On a sync request's reply, its unique id (RunJobData.id): its gateway routes the reply by it,
   * never by `rid`, which a caller may choose (x-request-id) and two callers may share.
   */
  id?: string;
  status: number;
  replica: string;
  /** The version of the function that ran it (Embers-Version). */
  version?: string;
  /**
   * queue: waiting for a replica; batch: model calls waiting for their batch to start (forming
   * or behind a running one); infer: this request's share of inference (by rows; metered);
   * exec: how long the inferences it rode in ran (a batch's whole run); handler: its wall time.
   * batch, infer and exec are sums over the request's model calls (calls in parallel count each).
   * input (compute input): from taking the request to its first model call (input validation and
   * pre-processing; all of the handler when it calls no model); output (compute output): from the
   * last model call's answer to the serialised result. call: time its handler waited on calls to
   * other functions (ctx.call; calls in parallel count each), measured by its replica.
   */
  timing: { queueMs: number; handlerMs: number; inferMs: number; batchMs: number; execMs: number; inputMs: number; outputMs: number; callMs?: number };
  /** Present when the request waited for this replica's cold start. */
  cold?: { waitedMs: number; phases: ColdStartPhases };
  /** The handler answered with bytes (binary()) of this Content-Type; absent: the body is JSON. */
  type?: string;
  /** An inference response with binary tensors: its JSON header's length in bytes (Inference-Header-Content-Length). */
  headerLength?: number;
  /**
   * The handler yielded, and its chunks went to its caller's stream (RunJobData.stream): the last
   * one's sequence number, which the gateway reads through before its final event.
   */
  chunks?: number;
}

/** A replica's start, phase by phase (ms). model_fetch is 0 when every model was on disk. */
export interface ColdStartPhases {
  spawnMs: number;
  bundleMs: number;
  modelFetchMs: number;
  modelLoadMs: number;
  setupMs: number;
  warmupMs: number;
  totalMs: number;
}

export interface ErrorBody {
  error: { code: string; message: string; details?: unknown };
}

/** Where a function's replicas should run: the leading scheduler's word to the node agents. */
export interface PlacementRecord {
  version: string;
  nodes: Record<string, number>;
}

export interface ScaleRecord {
  desired: number;
  inFlight: number;
  ready: number;
  reason: string;
  at: string;
}

/** A node agent's advertisement: what it can run. */
export interface NodeRecord {
  id: string;
  host: string;
  pid: number;
  slots: number;
  /** Memory (bytes) its replicas may hold together (EMBERS_NODE_MEMORY). */
  memoryBytes?: number;
  /** CPU cores, and how many a replica running models keeps busy here (0 on GPUs). */
  cores?: number;
  modelReplicaCores?: number;
  gpus: { index: number; name: string; memoryMiB: number }[];
  replicas: number;
  startedAt: string;
  /** What the node can enforce on user code (runtime/replica/sandbox.ts); `missing` says what it cannot, for a person. */
  sandbox?: { isolates: boolean; ownUid: boolean; cgroup: 'v1' | 'v2' | null; rlimits: boolean; missing: string[]; unsandboxedAllowed: boolean };
}

/** Events on the registry channel besides deploy/delete. */
export type PlatformEvent =
  | { type: 'deployed' | 'deleted'; name: string; version?: string }
  | { type: 'placement' }
  /** A gateway queued work for the function: the scheduler decides now rather than at its next tick. */
  | { type: 'wake'; name: string }
  /** A batch was created or asked to cancel: the feeder looks now. */
  | { type: 'batch'; id: string }
  | { type: 'replica'; name: string; replica: string; state: 'ready' | 'failed'; coldStart?: ColdStartPhases; error?: { phase: string; message: string } };

/** Exit code of a replica that asks its node agent to replace it (a handler that would not stop). */
export const EXIT_REPLACE_ME = 75;
/** Exit code of a replica whose user code broke its channel: replaced after a growing wait (scheduler/restart-penalty.ts). */
export const EXIT_BROKE_CHANNEL = 76;

/**
 * Where a tenant's objects live in the platform bucket: below `tenants/<id>/`, except the
 * default tenant's, which keep the keys they had before tenants (core/tenant-objects.ts judges
 * which tenant a key belongs to).
 */
export const tenantPrefix = (tenant: string) => (tenant === DEFAULT_TENANT ? '' : `tenants/${tenant}/`);

export const s3Keys = {
  bundle: (name: string, version: string) => `functions/${name}/${version}/bundle.mjs`,
  manifest: (name: string, version: string) => `functions/${name}/${version}/manifest.json`,
  model: (tenant: string, sha256: string) => `${tenantPrefix(tenant)}models/sha256/${sha256}.onnx`,
  batchInput: (tenant: string, id: string) => `${tenantPrefix(tenant)}batches/${id}/input.jsonl`,
  batchOutput: (tenant: string, id: string) => `${tenantPrefix(tenant)}batches/${id}/output.jsonl`,
  batchErrors: (tenant: string, id: string) => `${tenantPrefix(tenant)}batches/${id}/errors.jsonl`,
  /** An upload of the Files API (core/files.ts). */
  file: (tenant: string, id: string) => `${tenantPrefix(tenant)}files/${id}.jsonl`,
};

/**
 * A reply: its header as JSON, a newline, then its body: the result or error JSON, or, when the
 * header says `type`, the bytes a handler answered with (binary()), as they are. JSON never holds
 * a raw newline, so the first one ends the header.
 */
export function encodeReply(header: ReplyHeader, body: string): string;
export function encodeReply(header: ReplyHeader, body: Uint8Array): Buffer;
export function encodeReply(header: ReplyHeader, body: string | Uint8Array): string | Buffer {
  return typeof body === 'string' ? `${JSON.stringify(header)}\n${body}` : Buffer.concat([Buffer.from(`${JSON.stringify(header)}\n`), body]);
}

/**
 * Several replies for one gateway in one message (one PUBLISH, one message for the gateway to
 * read): `+<length>,<length>,…\n` then the replies (encodeReply) back to back, lengths in bytes.
 * A single reply stays as it is (it starts with its header's `{`). Text when every reply is.
 */
export function encodeReplies(messages: (string | Buffer)[]): string | Buffer {
  if (messages.length === 1) return messages[0];
  const prefix = `+${messages.map((m) => (typeof m === 'string' ? Buffer.byteLength(m) : m.length)).join(',')}\n`;
  return messages.every((m) => typeof m === 'string') ? prefix + messages.join('') : Buffer.concat([prefix, ...messages].map((m) => (typeof m === 'string' ? Buffer.from(m) : m)));
}

/**
 * The replies of a message from encodeReplies (or a single reply), read as bytes: a body is a
 * view on the message, never decoded (the gateway writes it out as it is, JSON or not).
 */
export function decodeReplies(message: Buffer): { header: ReplyHeader; body: Buffer }[] {
  const one = (at: number, end: number) => {
    const nl = message.indexOf(0x0a, at);
    if (nl < 0 || nl >= end) throw new Error('a reply without a header line');
    return { header: JSON.parse(message.toString('utf8', at, nl)) as ReplyHeader, body: message.subarray(nl + 1, end) };
  };
  if (message[0] !== 0x2b) return [one(0, message.length)];
  const nl = message.indexOf(0x0a);
  const out: { header: ReplyHeader; body: Buffer }[] = [];
  let at = nl + 1;
  for (const n of message.toString('latin1', 1, nl).split(',')) {
    const len = Number(n);
    out.push(one(at, at + len));
    at += len;
  }
  return out;
}

export function errorBody(code: string, message: string, details?: unknown): ErrorBody {
  return { error: { code, message, ...(details === undefined ? {} : { details }) } };
}
