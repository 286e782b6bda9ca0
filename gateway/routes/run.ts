// POST /v1/run/:name — validate, enqueue on the function's queue, wait for the reply (or, for a
// caller that accepts text/event-stream, stream the answer's chunks as events).
import { Hono, type Context } from 'hono';
import { limitBody } from '../middleware/body-limit.ts';
import { FUNCTION_NAME, isJsonType } from '../../core/contracts.ts';
import { checkInput, describeErrors } from '../../core/validate.ts';
import { refusal } from '../quotas.ts';
import { ApiError, functionNotFound } from '../errors.ts';
import { readBytes, readJsonText } from '../request-body.ts';
import type { GatewayEnv, GatewayDeps } from '../deps.ts';
import { actingTenant, requireScope } from '../middleware/auth.ts';
import { admit, runAsync, runSync, setTimingHeaders, type Submission } from '../submit.ts';
import { acceptsEventStream } from '../sse.ts';
import { runStreamed } from '../stream-run.ts';
import { callerOf } from '../caller.ts';
import { VERSION_KEY_HEADER } from '../functions-cache.ts';
import { webhookOf } from '../webhook-url.ts';

export function runRoutes(deps: GatewayDeps) {
  const app = new Hono<GatewayEnv>();
  const { functions } = deps;
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
      // Below the gateway the function goes by its key: its queue, metrics, replicas; a split's
      // version by a key of its own.
      const served = functions.serving(found, c.req.header(VERSION_KEY_HEADER));
      const { key, fn } = served instanceof Promise ? await served : served;
      requireScope(c, 'run');
      const failure = functions.startFailure(key);
      if (failure) throw refusal(503, 'replica_start_failed', `${name} cannot start right now: ${failure.phase} failed: ${failure.message}; requests go through again in ${failure.retryInS} s`, failure.retryInS);
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
      const bytesIn = bytes?.length ?? (Number(c.req.header('content-length')) || Buffer.byteLength(inputJson));
      const submission: Submission = { name, key, fn, auth: c.get('auth'), rid, data: { input, raw }, payload: { inputJson, body: bytes }, bytesIn };
      await admit(deps, submission);
      if (async) {
        const job = await runAsync(deps, submission, webhook);
        // From EMBERS_PUBLIC_URL: the request's Host header is the caller's to write.
        const url = `${deps.publicUrl}/v1/jobs/${job}`;
        c.header('location', url);
        c.header('preference-applied', 'respond-async');
        return c.json({ id: job, status: 'queued', url }, 202);
      }
      // A caller that asks for events gets a streaming handler's chunks as they come (stream-run.ts).
      const ran = acceptsEventStream(c.req.header('accept')) ? await runStreamed(c, deps, submission, t0) : await runSync(deps, submission, t0, callerOf(c));
      if (ran instanceof Response) return ran;
      const { header, body, totalMs } = ran;
      setTimingHeaders(c, header, totalMs);
      c.header('embers-version', header.version ?? fn.manifest.version);
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
