// `embers/testing`: runs a function file in this process the way a replica runs it (its input
// checked by its schema, its real models on onnxruntime with dynamic batching, its setup and
// warmup, its answer encoded as the HTTP body) with no Redis, S3 or gateway: for unit tests.
import { fileURLToPath, pathToFileURL } from 'node:url';
import { stat } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { DeploySpecSchema, errorBody, type ErrorBody } from '../core/contracts.ts';
import { createLogger } from '../core/log.ts';
import { resolveModelFile } from '../cli/deploy.ts';
import { UserCode } from '../runtime/user-code/user-code.ts';
import type { ExecutionProvider } from '../native/session.ts';
import { HandlerError, isFunctionDefinition } from './index.ts';
import type { CallRequest } from '../runtime/channel/messages.ts';

export interface LoadOptions {
  /** What the function's secrets would give ctx.env (merged over its `vars`, as on the platform). */
  env?: Record<string, string>;
}

export interface InvokeOptions extends LoadOptions {
  /** Run as a batch line (its model calls yield to live ones), as `POST /v1/batches` does. */
  batch?: boolean;
  /** Request id the handler sees as ctx.requestId. @default a new one per call */
  requestId?: string;
  /**
   * Stand-ins for the functions the handler calls (`ctx.call`, `ctx.stream`), by name: each gets
   * the call's input (as JSON would carry it) and a signal, and returns the callee's output (an
   * async iterable: its chunks), or throws a HandlerError for the callee's error answer. A name
   * without a stand-in answers 404 function_not_found, as a function that does not exist.
   * @example invoke('./ocr-split.ts', { image }, { calls: { 'ocr-det': () => ({ boxes: [] }) } })
   */
  calls?: Record<string, StandIn>;
}

/** A stand-in for a called function (InvokeOptions.calls). */
export type StandIn = (input: unknown, ctx: { signal: AbortSignal }) => unknown;


export interface InvokeResult {
  /** The HTTP status the platform would answer. */
  status: number;
  /** A JSON answer, parsed (a streaming handler's chunks as an array). */
  output?: unknown;
  /** An error answer's `{ code, message }`. */
  error?: ErrorBody['error'];
  /** A binary answer's bytes and Content-Type. */
  bytes?: Uint8Array;
  contentType?: string;
  /** As Server-Timing splits it (ms). */
  timing: { handlerMs: number; inferMs: number; batchMs: number };
}

export interface LoadedFunction {
  run(input: unknown, o?: InvokeOptions): Promise<InvokeResult>;
  /** Its models' batching counters, as a replica reports them (calls, rows, executions). */
  stats(): ReturnType<UserCode['stats']>['models'];
  /** Releases its model sessions (their threads keep the process alive). */
  close(): Promise<void>;
}

const loaded = new Map<string, Promise<LoadedFunction>>();
let runs = 0;

/** Runs `input` through the function in `file` (a path or file: URL), loading it on first use (with `o.env`). */
export async function invoke(file: string | URL, input: unknown, o: InvokeOptions = {}): Promise<InvokeResult> {
  const at = typeof file === 'string' ? path.resolve(file) : fileURLToPath(file);
  let fn = loaded.get(at);
  if (!fn) {
    fn = load(at, o);
    loaded.set(at, fn);
    fn.catch(() => loaded.delete(at));
  }
  return (await fn).run(input, o);
}

/** Closes every function `invoke` loaded: call it when the tests are done (`after(close)`). */
export async function close(): Promise<void> {
  const all = [...loaded.values()];
  loaded.clear();
  await Promise.all(all.map((f) => f.then((x) => x.close(), () => {})));
}

/** Loads the function in `file` (models, setup, warmup) for many runs. */
export async function load(file: string | URL, o: LoadOptions = {}): Promise<LoadedFunction> {
  const at = typeof file === 'string' ? path.resolve(file) : fileURLToPath(file);
  if (!(await stat(at).catch(() => null))?.isFile()) throw new Error(`no function file at ${at}`);
  const def = ((await import(pathToFileURL(at).href)) as { default?: unknown }).default;
  if (!isFunctionDefinition(def)) throw new Error(`${at} has no default export made with defineFunction() from "embers"`);
  const models: Record<string, { path: string; bytes: number }> = {};
  for (const [handle, ref] of Object.entries(def.models ?? {})) {
    if (ref.startsWith('s3://')) throw new Error(`model ${handle} is ${ref}: invoke runs models from local files (a path, or one inside an installed package)`);
    const local = await resolveModelFile(ref, at);
    models[handle] = { path: local, bytes: (await stat(local)).size };
  }
  const spec = DeploySpecSchema.pick({ batching: true, timeoutMs: true }).parse({ batching: def.batching, timeoutMs: def.timeoutMs });
  const log = createLogger(`fn:${def.name}`, (process.env.EMBERS_LOG_LEVEL as 'warn' | undefined) ?? 'warn');
  const standIns = new Map<number, Record<string, StandIn>>();
  const callsRunning = new Map<number, AbortController>();
  const user: UserCode = new UserCode({
    log,
    onStuck: (n) => log.error({ run: n }, 'handler still running after its timeout: a replica would be replaced'),
    // Chunks are gathered into the answer; give credit for each as it comes.
    sendChunk: (n) => user.credit(n, 1),
    sendCall: (n, call) => {
      const ctl = new AbortController();
      callsRunning.set(call.c, ctl);
      void callStandIn(standIns.get(n)?.[call.name], call, ctl.signal, (data) => user.calls.chunk(call.c, data)).then(({ status, body }) => {
        callsRunning.delete(call.c);
        user.calls.result(call.c, status, body);
      });
    },
    abortCall: (c) => callsRunning.get(c)?.abort(new Error('the caller let go of the call')),
  });
  const cores = os.availableParallelism();
  const providers = (process.env.EMBERS_EXECUTION_PROVIDERS ?? 'cpu').split(',').map((p) => p.trim()) as ExecutionProvider[];
  await user.start({
    type: 'assign',
    replica: 'invoke',
    env: {},
    fn: { name: def.name, version: 'local', timeoutMs: spec.timeoutMs, batching: spec.batching, env: { ...def.vars, ...o.env } },
    bundlePath: at,
    models,
    settings: { providers, threads: 1, instances: Math.min(4, cores), wideThreads: cores, batchYieldMs: 50, handlerGraceMs: 5_000, maxAnswerBytes: 16 * 1024 * 1024 },
  });
  return {
    async run(input, o = {}) {
      const n = ++runs;
      if (o.calls) standIns.set(n, o.calls);
      const r = await user.run({ type: 'run', n, rid: o.requestId ?? `invoke-${n}`, input, batch: o.batch ?? false, queueMs: 0 }).finally(() => standIns.delete(n));
      const timing = { handlerMs: r.timing.handlerMs, inferMs: r.timing.inferMs, batchMs: r.timing.batchMs };
      if (r.bytes) return { status: r.status, bytes: new Uint8Array(r.bytes.data), contentType: r.bytes.contentType, timing };
      const body = r.body === '' ? null : (JSON.parse(r.body) as unknown);
      return r.status >= 400 ? { status: r.status, error: (body as ErrorBody).error, timing } : { status: r.status, output: body, timing };
    },
    stats: () => user.stats().models,
    close: () => user.close(),
  };
}

/** A call answered by its stand-in, as the platform would answer it: its output as JSON (chunks passed on as they come), or its error. */
async function callStandIn(standIn: StandIn | undefined, call: CallRequest, signal: AbortSignal, chunk: (data: string) => void): Promise<{ status: number; body: string }> {
  if (!standIn) return { status: 404, body: JSON.stringify(errorBody('function_not_found', `no function named ${call.name}: give invoke a stand-in for it ({ calls: { '${call.name}': (input) => … } })`)) };
  try {
    const out = await standIn(JSON.parse(call.input) as unknown, { signal });
    if (out !== null && typeof out === 'object' && Symbol.asyncIterator in out) {
      const gathered: unknown[] = [];
      for await (const c of out as AsyncIterable<unknown>) {
        gathered.push(c);
        if (call.stream) chunk(JSON.stringify(c));
      }
      return { status: 200, body: JSON.stringify(gathered) };
    }
    return { status: 200, body: JSON.stringify(out ?? null) };
  } catch (err) {
    if (err instanceof HandlerError) return { status: err.status, body: JSON.stringify(errorBody(err.code, err.message)) };
    return { status: 500, body: JSON.stringify(errorBody('handler_error', `${call.name} failed: ${(err as Error)?.message ?? err}`)) };
  }
}
