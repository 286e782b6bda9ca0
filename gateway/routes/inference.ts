// The Open Inference Protocol (KServe v2) over HTTP, with Triton's binary tensor extension:
// health, server and model metadata, readiness and infer under /v2. A function is a model here
// when it takes tensors (a bare model, or a handler whose input is tensors()). Infer goes
// through the same admission, queue, metering and timing as /v1/run (submit.ts); errors are
// the protocol's `{ "error": message }`.
import { Hono, type Context } from 'hono';
import type { ContentfulStatusCode } from 'hono/utils/http-status';
import { FUNCTION_NAME } from '../../core/contracts.ts';
import { InferenceRequestError, readInferenceRequest, TENSOR_BYTES_FIELD } from '../../core/oip/request.ts';
import type { Datatype, TensorSignature, TensorSpec } from '../../core/oip/datatypes.ts';
import type { GatewayDeps, GatewayEnv } from '../deps.ts';
import { refusal } from '../quotas.ts';
import { ApiError, functionNotFound, onError } from '../errors.ts';
import { VERSION_KEY_HEADER, type ActiveFunction } from '../functions-cache.ts';
import { authenticate, actingTenant, requireScope } from '../middleware/auth.ts';
import { limitBody } from '../middleware/body-limit.ts';
import { readBytes } from '../request-body.ts';
import { batchable } from '../bare-model.ts';
import { callerOf } from '../caller.ts';
import { EMBERS_VERSION } from '../../core/version.ts';
import { admit, runSync, setTimingHeaders } from '../submit.ts';

/** The extensions GET /v2 names. */
export const EXTENSIONS = ['binary_tensor_data', 'model_configuration'];
const SERVER = { name: 'embers', version: EMBERS_VERSION };

export function inferenceRoutes(deps: GatewayDeps) {
  const app = new Hono<GatewayEnv>();
  // The same statuses and headers as the rest of the API, with the protocol's body.
  app.onError(onError(deps.log, (_code, message) => ({ error: message })));

  app.get('/', (c) => c.json({ ...SERVER, extensions: EXTENSIONS }));
  app.get('/health/live', (c) => c.json({ live: true }));
  app.get('/health/ready', async (c) => {
    const ready = await Promise.all([deps.redis.ping(), deps.store.ping()]).then(() => deps.replies.listening, () => false);
    return c.json({ ready }, ready ? 200 : 400);
  });

  app.use('/models/*', authenticate(deps.tenants, deps.adminKey, deps.keys));

  /**
   * The caller's function `name` at `version` (the active one, or a split's; a version is 'v3' or
   * '3'), if it takes tensors; to `infer` with no version named, the version its split picks.
   */
  const model = async (c: Context<GatewayEnv>, infer = false) => {
    const name = c.req.param('name') ?? '';
    if (!FUNCTION_NAME.test(name)) throw functionNotFound(name, 'malformed');
    const owned = await deps.functions.find(actingTenant(c), name);
    if (!owned) throw functionNotFound(name, 'run');
    const asked = c.req.param('version');
    const version = asked === undefined ? undefined : asked.startsWith('v') ? asked : `v${asked}`;
    // A version named in the path is served when it takes traffic; none named: the split decides.
    let found = version === undefined && infer ? await deps.functions.serving(owned, c.req.header(VERSION_KEY_HEADER)) : owned;
    if (version !== undefined && version !== owned.fn.manifest.version) {
      const pinned = owned.fn.split?.version === version ? await deps.functions.pinned(owned, version) : null;
      if (!pinned) throw new ApiError(404, 'version_not_found', `${name} serves its active version ${owned.fn.manifest.version}${owned.fn.split ? ` and ${owned.fn.split.version}` : ''}, not "${asked}"; \`embers versions list ${name}\` lists its versions`);
      found = pinned;
    }
    const { manifest } = found.fn;
    if (!manifest.tensors) throw new ApiError(400, 'not_a_model', `${name} does not take tensors: deploy an ONNX file as it is (\`embers deploy model.onnx\`) or make its input tensors() to call it here; call it through /v1/run/${name}`);
    return { name, ...found, tensors: manifest.tensors };
  };

  for (const base of ['/models/:name', '/models/:name/versions/:version']) {
    app.get(base, async (c) => {
      requireScope(c, 'read');
      const { name, fn, tensors } = await model(c);
      return c.json({ name, versions: [fn.manifest.version], platform: fn.manifest.kind === 'model' ? 'onnxruntime_onnx' : 'embers_handler', inputs: tensors.inputs, outputs: tensors.outputs });
    });

    // Triton's model configuration, which its clients and perf_analyzer read for the batch size.
    app.get(`${base}/config`, async (c) => {
      requireScope(c, 'read');
      const { name, fn, tensors } = await model(c);
      return c.json(modelConfig(name, fn.manifest.kind === 'model', tensors, fn.manifest.batching));
    });

    app.get(`${base}/ready`, async (c) => {
      requireScope(c, 'read');
      const { name, key } = await model(c);
      // A function at zero replicas is ready: its first request starts one. One whose replicas
      // cannot start is not.
      const ready = !deps.functions.startFailure(key);
      return c.json({ name, ready }, ready ? 200 : 400);
    });

    app.post(`${base}/infer`, limitBody(deps.maxBodyBytes, `inference request is over ${deps.maxBodyBytes} bytes (EMBERS_MAX_BODY_BYTES)`), async (c) => {
      const t0 = performance.now();
      const { name, key, fn, tensors } = await model(c, true);
      requireScope(c, 'run');
      const failure = deps.functions.startFailure(key);
      if (failure) throw refusal(503, 'replica_start_failed', `${name} cannot start right now: ${failure.phase} failed: ${failure.message}; requests go through again in ${failure.retryInS} s`, failure.retryInS);
      const raw = await readBytes(c);
      const { header, tail } = splitBody(raw, c.req.header('inference-header-content-length'));
      let request;
      try {
        request = readInferenceRequest(header, tail, tensors, deps.maxJsonDepth);
      } catch (err) {
        if (err instanceof InferenceRequestError) throw new ApiError(400, 'invalid_input', err.message);
        throw err;
      }
      const submission = { name, key, fn: fn as ActiveFunction, auth: c.get('auth'), rid: c.get('rid'), data: { input: request.descriptor, raw: TENSOR_BYTES_FIELD, tensors: true as const }, payload: { inputJson: undefined, body: request.body }, bytesIn: raw.length };
      await admit(deps, submission);
      // A caller that leaves stops the run (or takes it back unstarted), metered as disconnected.
      const reply = await runSync(deps, submission, t0, callerOf(c));
      setTimingHeaders(c, reply.header, reply.totalMs);
      if (reply.header.status >= 400) {
        // The handler's or replica's error, in the protocol's shape.
        const message = errorMessage(reply.body) ?? `${name} failed with status ${reply.header.status}`;
        return c.json({ error: message }, reply.header.status as ContentfulStatusCode);
      }
      c.header('content-type', reply.header.type ?? 'application/json');
      if (reply.header.headerLength !== undefined) c.header('inference-header-content-length', String(reply.header.headerLength));
      return c.body(reply.body as Uint8Array<ArrayBuffer>, 200);
    });
  }
  return app;
}

const TRITON_TYPES: Record<Datatype, string> = {
  BOOL: 'TYPE_BOOL', UINT8: 'TYPE_UINT8', UINT16: 'TYPE_UINT16', UINT32: 'TYPE_UINT32', UINT64: 'TYPE_UINT64', INT8: 'TYPE_INT8', INT16: 'TYPE_INT16', INT32: 'TYPE_INT32', INT64: 'TYPE_INT64', FP16: 'TYPE_FP16', FP32: 'TYPE_FP32', FP64: 'TYPE_FP64', BYTES: 'TYPE_STRING',
};

/**
 * A Triton model configuration. When every tensor's first dimension is of any size, that is the
 * batch dimension: `max_batch_size` is the function's, and `dims` leave it out, as Triton's do.
 */
export function modelConfig(name: string, bare: boolean, tensors: TensorSignature, batching: { maxBatchSize: number; maxDelayMs: number }) {
  const batched = batchable(tensors) && batching.maxBatchSize > 1;
  const tensor = (t: TensorSpec) => ({ name: t.name, data_type: TRITON_TYPES[t.datatype], dims: batched ? t.shape.slice(1) : t.shape });
  return {
    name,
    platform: bare ? 'onnxruntime_onnx' : 'embers_handler',
    backend: bare ? 'onnxruntime' : 'embers',
    max_batch_size: batched ? batching.maxBatchSize : 0,
    input: tensors.inputs.map(tensor),
    output: tensors.outputs.map(tensor),
    ...(batched ? { dynamic_batching: { max_queue_delay_microseconds: Math.round(batching.maxDelayMs * 1000) } } : {}),
  };
}

/** The JSON header and the binary tensors after it (Inference-Header-Content-Length), or all of it JSON. */
function splitBody(body: Buffer, headerLength: string | undefined): { header: unknown; tail: Buffer } {
  let length = body.length;
  if (headerLength !== undefined) {
    length = Number(headerLength);
    if (!/^\d+$/.test(headerLength.trim()) || length > body.length) throw new ApiError(400, 'invalid_input', `Inference-Header-Content-Length must be the JSON header's length in bytes (0..${body.length}), not "${headerLength}"`);
  }
  if (length === 0) throw new ApiError(400, 'invalid_input', 'the request has no JSON header: send {"inputs": [...]}');
  try {
    return { header: JSON.parse(body.toString('utf8', 0, length)), tail: body.subarray(length) };
  } catch (err) {
    throw new ApiError(400, 'invalid_json', `the inference request's JSON header is not valid JSON: ${(err as Error).message}`);
  }
}

function errorMessage(body: Buffer): string | undefined {
  try {
    return (JSON.parse(body.toString('utf8')) as { error?: { message?: string } }).error?.message;
  } catch {
    return undefined;
  }
}
