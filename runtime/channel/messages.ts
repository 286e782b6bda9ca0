// The messages between a replica (trusted: it holds the queues, Redis and S3) and its user-code
// process (untrusted: the tenant's bundle and models, sandboxed). This channel is all the user
// code reaches; the replica checks every message it receives against what it already knows
// (runtime/replica/user-code-channel.ts), since the process that sends them runs the tenant's
// code. Messages travel as JSON in frames (frames.ts); bytes in frames of their own, under the
// run's number.
import type { ReplyHeader } from '../../core/contracts.ts';
import type { TensorSignature } from '../../core/oip/datatypes.ts';
import type { ExecutionProvider } from '../../native/session.ts';
import type { DynamicBatcher } from '../user-code/batcher.ts';
import type { ModelSession } from '../../native/session.ts';
import type { LogCall, StartPhase } from '../../core/log-lines.ts';

/** What the user code loads: files the replica prepared (read-only in the sandbox). */
export interface AssignMessage {
  type: 'assign';
  replica: string;
  /** Per-replica settings applied before any model session exists (CUDA_VISIBLE_DEVICES only). */
  env: { CUDA_VISIBLE_DEVICES?: string };
  fn: {
    name: string;
    version: string;
    timeoutMs: number;
    batching: { maxBatchSize: number; maxDelayMs: number };
    /** A bare model: the platform's handler runs `models.model` (model-function.ts). */
    kind?: 'model';
    tensors?: TensorSignature;
    /**
     * What `ctx.env` holds: the function's vars and its secrets, opened by the replica. Only on
     * this channel: never in the process's environment, its arguments or a file.
     */
    env: Record<string, string>;
  };
  bundlePath: string;
  models: Record<string, { path: string; bytes: number }>;
  settings: {
    providers: ExecutionProvider[];
    threads: number;
    instances: number;
    wideThreads: number;
    batchYieldMs: number;
    handlerGraceMs: number;
    maxAnswerBytes: number;
  };
}

/** One request to run. `n` numbers it on this channel; the replica keeps what it is for. */
export interface RunMessage {
  type: 'run';
  n: number;
  rid: string;
  input: unknown;
  /** The input field that holds a binary request body (the function's binaryInput)… */
  raw?: string;
  /** …and that body's length: its bytes come on the byte channel, and the user code puts them there as a Buffer. */
  rawBytes?: number;
  /** The input is an inference request (core/oip/request.ts); its tensors' bytes fill its `data`. */
  tensors?: true;
  /** Latest start (ms since epoch) of a synchronous run. */
  deadline?: number;
  /** A batch line: its model calls yield to live requests. */
  batch: boolean;
  /** Time it waited in the queue (ms), for its timing. */
  queueMs: number;
  /**
   * Where a handler that yields sends its chunks as they come (chunk messages, within the
   * replica's credit: handler-stream.ts): a sync caller reading events ('caller'), or an async
   * job, which also gets them gathered as its output ('job'). Unset: gathered only, as its answer.
   */
  streamTo?: 'caller' | 'job';
  /** Someone tails the function: the handler's `ctx.log` lines come back too (log messages). */
  tail?: true;
  /** Called by another function (`ctx.call`): by when (ms since epoch) its caller needs the answer; its budget ends then if that is sooner. */
  endBy?: number;
}

/** What a handler's `ctx.call` or `ctx.stream` asks its replica to run (runtime/user-code/calls.ts). */
export interface CallRequest {
  /** Its number in this process: its answer and chunks come under it. */
  c: number;
  name: string;
  /** The input's JSON text. */
  input: string;
  timeoutMs?: number;
  /** The caller reads the callee's chunks as they come (call_chunk messages). */
  stream?: true;
}

export type ToUserCode =
  | AssignMessage
  | RunMessage
  | { type: 'abort'; n: number; canceled: boolean }
  /** The replica took `k` more of run `n`'s chunks: that many more may be sent. */
  | { type: 'credit'; n: number; k: number }
  /** Whether other replicas on the node run live requests now (the replica tracks them; live-first.ts). */
  | { type: 'peers'; busy: boolean }
  | { type: 'stats' }
  /** Call c's answer: its status and JSON body (an error's `{ error: { code, message } }` below 200 or from 300). */
  | { type: 'call_result'; c: number; status: number; body: string }
  /** One chunk (its JSON) the callee of a streamed call yielded. */
  | { type: 'call_chunk'; c: number; data: string };

export interface UserStats {
  liveFirst: { yields: number; heldMs: number };
  gc: { count: number; ms: number };
  models: Record<string, { provider: string; fallback?: string; instances: number; lone?: ModelSession['lone'] } & DynamicBatcher['stats']>;
}

export type FromUserCode =
  /** Booted (modules loaded), waiting for its assignment. */
  | { type: 'standby' }
  | { type: 'started'; phases: { bundleMs: number; modelLoadMs: number; setupMs: number; warmupMs: number } }
  | { type: 'start_failed'; phase: string; message: string }
  /**
   * A run's answer. Its JSON body comes as `body`, or, when long, as the first `bodyBytes` bytes
   * of the run's bytes frame; a binary answer's `bytes.length` bytes follow them there.
   */
  | { type: 'result'; n: number; status: number; body?: string; bodyBytes?: number; bytes?: { contentType: string; length: number; headerLength?: number }; timing: ReplyHeader['timing']; canceled?: boolean; streamed?: true }
  /** One chunk (its JSON) a handler yielded, for a run with `streamTo`. */
  | { type: 'chunk'; n: number; data: string }
  /**
   * A tailed run's `ctx.log` line (tail-log.ts), or with `phase` one logged by setup or warmup
   * (n 0), and/or how many lines the process dropped since it last said (over LOG_LINES_PER_S).
   */
  | { type: 'log'; n: number; call?: LogCall; dropped?: number; phase?: StartPhase }
  /** Run n's handler ran past its timeout and grace and will not stop: replace the process. */
  | { type: 'stuck'; n: number }
  /** In answer to the replica's `stats`, one each. */
  | { type: 'stats'; stats: UserStats }
  /** Run n's handler calls another function (checked by the replica: runtime/replica/calls.ts). */
  | ({ type: 'call'; n: number } & CallRequest)
  /** The handler no longer waits for call c (its signal aborted). */
  | { type: 'call_abort'; c: number }
  /** The handler read `k` more chunks of streamed call c: that many more may come. */
  | { type: 'call_credit'; c: number; k: number };

/** A start that failed, with the phase it failed in (bundle, model_load, setup, warmup, …). */
export class StartFailure extends Error {
  constructor(
    readonly phase: string,
    message: string,
  ) {
    super(message);
  }
}
