// POST /v1/run/:name — validate, enqueue on the function's queue, wait for the reply.
import { refusedHost } from '../../core/webhook-target.ts';
import { randomUUID } from 'node:crypto';
import { Hono, type Context } from 'hono';
import { limitBody } from '../middleware/body-limit.ts';
import { FUNCTION_NAME, isJsonType, type ColdStartPhases, type RunJobData } from '../../core/contracts.ts';
import { JobStore } from '../../core/jobs.ts';
import { enqueueStamp } from '../../core/clock.ts';
import { checkInput, describeErrors } from '../../core/validate.ts';
import { ApiError, functionNotFound } from '../errors.ts';
import { readBytes, readJsonText } from '../request-body.ts';
import { acquireSlot, checkRate } from '../quotas.ts';
import type { GatewayEnv, GatewayDeps } from '../deps.ts';
import type { AuthContext } from '../../core/tenants.ts';
import { plainName } from '../../core/names.ts';
import { FunctionGoneError, KeyRejectedError } from '../../core/live-queue.ts';
import { actingTenant, invalidKey, requireScope, revokedKey } from '../middleware/auth.ts';
import { keys } from '../../core/keys.ts';

/** Waiting past the deadline by this much lets a reply that is on its way arrive. */
const REPLY_GRACE_MS = 2_000;

export function runRoutes(deps: GatewayDeps) {
  const app = new Hono<GatewayEnv>();
  const { functions, replies, live, metrics, gatewayId } = deps;
  /** Runs an admission step; a refusal (429, 503 redis_full) is counted by function and code. */
  const counted = async <T>(name: string, step: () => Promise<T>): Promise<T> => {
    try {
      return await step();
    } catch (err) {
      if (err instanceof ApiError && (err.status === 429 || err.code === 'redis_full')) metrics.refused.inc({ function: name, code: err.code });
      throw err;
    }
  };

  app.post(
    '/:name',
    limitBody(deps.maxBodyBytes, `request body is over ${deps.maxBodyBytes} bytes (EMBERS_MAX_BODY_BYTES)`),
    async (c) => {
      const t0 = performance.now();
      const name = c.req.param('name');
      const rid = c.get('rid');
      if (!FUNCTION_NAME.test(name)) throw functionNotFound(name, 'malformed');
      const found = await functions.find(actingTenant(c), name);
      if (!found) throw functionNotFound(name, 'run');
      // Below the gateway the function goes by its key: its queue, metrics, replicas.
      const { key, fn } = found;
      requireScope(c, 'run');
      const failure = functions.startFailure(key);
      if (failure) throw new ApiError(503, 'replica_start_failed', `${name} cannot start right now: ${failure.phase} failed: ${failure.message}`);
      const { input, inputJson, body: bytes, raw } = await readInput(c, name, fn.manifest.binaryInput, deps.maxJsonDepth);
      const verdict = raw === undefined ? checkInput(fn.validate, input) : 'valid';
      if (verdict === 'too_deep') throw new ApiError(400, 'too_deep', `input nests too deeply for the recursive schema of ${name} to be checked; send flatter JSON`);
      if (verdict === 'invalid') {
        const binary = fn.manifest.binaryInput;
        const hint = binary ? ` (to send "${binary}" as bytes, make them the body, with their own Content-Type)` : '';
        throw new ApiError(400, 'invalid_input', `input does not match the schema of ${name}: ${describeErrors(fn.validate)}${hint}`, fn.validate.errors);
      }
      const async = /\brespond-async\b/i.test(c.req.header('prefer') ?? '');
      // Checked before the admission steps, so a request refused for it costs no rate token.
      const webhook = webhookOf(c.req.query('webhook') ?? c.req.header('embers-webhook'), deps.webhookAllowPrivate ?? false);
      if (webhook && !async) throw new ApiError(400, 'invalid_webhook', 'a webhook is called when an async run finishes: add the header "Prefer: respond-async" (a synchronous run answers in its response)');
      const stamp = enqueueStamp();
      const auth = c.get('auth');
      const bill = { t: fn.tenant, k: auth.keyId, bin: bytes?.length ?? (Number(c.req.header('content-length')) || Buffer.byteLength(inputJson)) };
      await counted(key, async () => {
        await checkRate(deps.redis, auth);
        await deps.queueDepth.check(key, fn.manifest.maxQueueLength ?? 10_000);
        await deps.redisMemory.check(bill.bin);
      });
      if (async) {
        const job = await enqueueAsync(deps, key, { rid, input, raw, ...stamp, ...bill }, { inputJson, body: bytes }, auth, webhook);
        // From EMBERS_PUBLIC_URL: the request's Host header is the caller's to write.
        const url = `${deps.publicUrl}/v1/jobs/${job}`;
        c.header('location', url);
        c.header('preference-applied', 'respond-async');
        return c.json({ id: job, status: 'queued', url }, 202);
      }
      if (!replies.listening) throw new ApiError(503, 'unavailable', 'this gateway is reconnecting to Redis and cannot receive replies yet; retry shortly');
      // Time in the queue (cold starts included) and handler time are bounded separately.
      // The reply and the in-flight slot go by an id of the gateway's own: the request id may be
      // the caller's (x-request-id), and two callers, of two tenants even, may send the same one.
      const id = randomUUID();
      const data: RunJobData = { rid, id, gw: gatewayId, input, raw, ...stamp, deadline: stamp.enq + deps.queueTimeoutMs, ...bill };
      const release = await counted(key, () => acquireSlot(deps.redis, auth, id, deps.queueTimeoutMs + fn.manifest.timeoutMs + REPLY_GRACE_MS));
      const wait = replies.expect(id, deps.queueTimeoutMs + fn.manifest.timeoutMs + REPLY_GRACE_MS);
      metrics.inflight.inc();
      let entry: string | undefined;
      let reply;
      try {
        entry = await live.add(key, data, { keyHash: auth.verifyHash, inputJson, body: bytes, mustBeDeployed: true });
        deps.wake(key);
        reply = await wait;
      } catch (err) {
        replies.cancel(id);
        throw notQueued(deps, err, key, auth.keyId);
      } finally {
        metrics.inflight.dec();
        release();
      }
      const totalMs = performance.now() - t0;
      metrics.duration.observe({ function: key }, totalMs / 1000);
      if (!reply) {
        // Nobody answered in time: take the job back if no replica has started it.
        if (entry) await live.remove(key, entry).catch(() => 0);
        metrics.requests.inc({ function: key, status: '504' });
        throw new ApiError(504, 'timeout', `${name} did not answer in time (queue limit ${deps.queueTimeoutMs} ms + run limit ${fn.manifest.timeoutMs} ms); see \`embers functions show ${name}\``);
      }
      const { header, body } = reply;
      metrics.requests.inc({ function: key, status: String(header.status) });
      metrics.queue.observe({ function: key }, header.timing.queueMs / 1000);
      const t = header.timing;
      const cold = header.cold ? `cold;dur=${round(header.cold.waitedMs)}, ` : '';
      // infer: how long the inferences it rode in ran, summed over its calls (usage meters its share).
      c.header('server-timing', `${cold}queue;dur=${round(t.queueMs)}, input;dur=${t.inputMs}, batch;dur=${round(t.batchMs)}, infer;dur=${round(t.execMs)}, output;dur=${t.outputMs}, handler;dur=${t.handlerMs}, total;dur=${round(totalMs)}`);
      if (header.cold) c.header('embers-cold-start', coldStartHeader(header.cold.phases));
      // The handler answered with bytes (binary()): they go out as they are, with their type.
      c.header('content-type', header.type ?? 'application/json');
      // (A Buffer from a socket read sits on an ArrayBuffer; Hono's type wants that said.)
      return c.body(body as Uint8Array<ArrayBuffer>, header.status as 200);
    },
  );
  return app;
}

/**
 * The run's input. A JSON body is parsed (its text is queued as it came); a function with
 * `binaryInput` takes any other Content-Type as bytes, queued beside an input of `{}` that the
 * replica completes with them (`raw` names the field).
 */
async function readInput(c: Context<GatewayEnv>, name: string, binaryInput: string | undefined, maxDepth: number): Promise<{ input: unknown; inputJson: string; body?: Buffer; raw?: string }> {
  const type = c.req.header('content-type');
  if (binaryInput !== undefined && !isJsonType(type)) {
    if (/^\s*multipart\//i.test(type!)) {
      throw new ApiError(415, 'unsupported_media_type', `${name} takes its "${binaryInput}" as the whole body with the file's own Content-Type (e.g. curl --data-binary @photo.png -H 'content-type: image/png'), not as a ${type!.split(';')[0]} form`);
    }
    const body = await readBytes(c);
    if (body.length === 0) throw new ApiError(400, 'invalid_input', `request body is empty; send the bytes for ${name}'s "${binaryInput}" (Content-Type ${type})`);
    return { input: {}, inputJson: '{}', body, raw: binaryInput };
  }
  try {
    const { value, text } = await readJsonText(c, maxDepth);
    return { input: value, inputJson: text };
  } catch (err) {
    if (!(err instanceof ApiError) || err.code !== 'invalid_json') throw err;
    // Say what the caller likely meant rather than only quote the parser.
    if (!isJsonType(type)) {
      throw new ApiError(415, 'unsupported_media_type', `${name} takes JSON bodies (Content-Type application/json), not ${type}; a function takes binary bodies when its definition sets binaryInput`);
    }
    if (binaryInput !== undefined) {
      throw new ApiError(400, 'invalid_json', `${err.message}; to send ${name}'s "${binaryInput}" as bytes instead, give the body its own Content-Type (e.g. image/png or application/octet-stream; curl -d sends application/x-www-form-urlencoded, read as JSON)`);
    }
    throw err;
  }
}

/** Queues an async run of the function under `key`: its record first (so GET never misses it), then the job itself. */
async function enqueueAsync(deps: GatewayDeps, key: string, data: RunJobData, payload: { inputJson: string; body?: Buffer }, auth: AuthContext, webhook: string | undefined): Promise<string> {
  const id = JobStore.newId();
  try {
    await deps.jobs.create({ id, fn: key, tenant: data.t!, key: auth.keyId, webhook });
    await deps.live.add(key, { ...data, job: id }, { keyHash: auth.verifyHash, mustBeDeployed: true, ...payload });
  } catch (err) {
    await deps.redis.del(keys.job(id)).catch(() => 0);
    throw notQueued(deps, err, key, auth.keyId);
  }
  deps.wake(key);
  return id;
}

/**
 * Why LiveQueue.add queued nothing, as the caller's answer: the key the gateway had cached was
 * revoked or removed since (401), or the function was deleted after this gateway looked it up
 * (404); either is forgotten here. Anything else is Redis out of reach (503).
 */
function notQueued(deps: GatewayDeps, err: unknown, key: string, keyId: string): ApiError {
  if (err instanceof KeyRejectedError) {
    deps.keys.forget(err.keyHash);
    return err.reason === 'revoked' ? revokedKey(keyId) : invalidKey();
  }
  if (err instanceof FunctionGoneError) {
    deps.functions.forget(key);
    return functionNotFound(plainName(key), 'deleted');
  }
  return new ApiError(503, 'unavailable', `could not queue the request (Redis unreachable?): ${(err as Error).message}; retry shortly`);
}

/** A webhook must be an absolute http(s) URL, on a public address unless private ones are allowed (its host is resolved again at each delivery). */
function webhookOf(raw: string | undefined, allowPrivate: boolean): string | undefined {
  if (raw === undefined || raw === '') return undefined;
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new ApiError(400, 'invalid_webhook', `webhook "${raw}" is not an absolute URL; give one like https://example.com/hooks/embers`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new ApiError(400, 'invalid_webhook', `webhook must be an http or https URL, not ${url.protocol}`);
  // fetch refuses such a URL, so every delivery would fail after the run was accepted.
  if (url.username !== '' || url.password !== '') throw new ApiError(400, 'invalid_webhook', 'webhook URLs cannot carry a user or password (user:password@host); check the Embers-Signature header instead (GET /v1/webhooks/secret)');
  const refused = allowPrivate ? null : refusedHost(url);
  if (refused) throw new ApiError(400, 'invalid_webhook', `webhook not allowed: ${refused}; webhooks go to public addresses (EMBERS_WEBHOOK_ALLOW_PRIVATE=1 allows private ones)`);
  return url.href;
}

const round = (n: number) => Math.round(n * 100) / 100;

/** `spawn=612;bundle=98;model_fetch=0;model_load=505;setup=0;warmup=41;total=1262` (ms). */
export function coldStartHeader(p: ColdStartPhases): string {
  const parts: [string, number][] = [
    ['spawn', p.spawnMs],
    ['bundle', p.bundleMs],
    ['model_fetch', p.modelFetchMs],
    ['model_load', p.modelLoadMs],
    ['setup', p.setupMs],
    ['warmup', p.warmupMs],
    ['total', p.totalMs],
  ];
  return parts.map(([k, v]) => `${k}=${Math.round(v)}`).join(';');
}
