// /v1/batches — bulk batch jobs (anchor: the OpenAI Batch API). The gateway stores the input
// in S3 and the record in Redis; the feeder in the leading scheduler does the rest.
import { createReadStream } from 'node:fs';
import { Readable } from 'node:stream';
import type { ReadableStream as WebReadableStream } from 'node:stream/web';
import { Hono, type Context } from 'hono';
import { canAccess } from '../../core/tenants.ts';
import { requireScope } from '../middleware/auth.ts';
import { z } from 'zod';
import { BATCH_ID, BatchStore, type BatchView } from '../../core/batches.ts';
import { FUNCTION_NAME, keys, s3Keys, type PlatformEvent } from '../../core/contracts.ts';
import { parseS3Uri, statusOf } from '../../core/s3.ts';
import { ApiError, readJson } from '../errors.ts';
import { limitBody } from '../middleware/body-limit.ts';
import { spoolBody } from '../spool.ts';
import type { GatewayDeps, GatewayEnv } from '../app.ts';

const FromUri = z.object({
  function: z.string().regex(FUNCTION_NAME, 'function must be a deployed function name'),
  input_uri: z.string().regex(/^s3:\/\/[^/]+\/.+$/, 'input_uri must look like s3://bucket/key.jsonl'),
});

export function batchRoutes(deps: GatewayDeps) {
  const app = new Hono<GatewayEnv>();
  const announce = (id: string) => deps.redis.publish(keys.registryChannel, JSON.stringify({ type: 'batch', id } satisfies PlatformEvent));

  /** The function's owner, if the caller may use it. */
  const mustExist = async (c: Context<GatewayEnv>, name: string): Promise<string> => {
    const fn = FUNCTION_NAME.test(name) ? await deps.functions.get(name) : null;
    if (!fn || !canAccess(c.get('auth'), fn.tenant)) throw new ApiError(404, 'function_not_found', `no function named "${name}"; deploy it first (\`embers functions\` lists them)`);
    return fn.tenant;
  };

  // JSONL in the body (?function=) up to EMBERS_MAX_BATCH_BYTES, judged by the handler as it
  // streams (never buffered whole: a chunked one goes through a temporary file); the JSON form
  // ({function, input_uri}) is small.
  const tooLarge = () => new ApiError(413, 'too_large', `batch input is over ${deps.maxBatchBytes} bytes (EMBERS_MAX_BATCH_BYTES); put it in S3 and send {"function", "input_uri"}`);
  const jsonLimit = limitBody(deps.maxBodyBytes, `a batch request without ?function= is JSON {"function", "input_uri"}, and this body is over ${deps.maxBodyBytes} bytes; send JSONL with ?function=NAME`);
  app.post('/', (c, next) => (c.req.query('function') !== undefined ? next() : jsonLimit(c, next)), async (c) => {
    requireScope(c, 'run');
    const id = BatchStore.newId();
    const fnParam = c.req.query('function');
    let fn: string;
    let owner: string;
    let inputUri: string;
    if (fnParam !== undefined) {
      // JSONL in the body, streamed to S3.
      fn = fnParam;
      owner = await mustExist(c, fn);
      const length = Number(c.req.header('content-length') ?? NaN);
      if (length > deps.maxBatchBytes) throw new ApiError(413, 'too_large', `batch input is ${length} bytes, over ${deps.maxBatchBytes} (EMBERS_MAX_BATCH_BYTES); put it in S3 and send {"function", "input_uri"}`);
      if (length === 0 || !c.req.raw.body) throw new ApiError(400, 'empty_batch', 'the body is empty; send JSONL, one {"custom_id": "…", "input": {…}} per line');
      const key = s3Keys.batchInput(id);
      if (Number.isFinite(length)) {
        await deps.store.put(key, Readable.fromWeb(c.req.raw.body as WebReadableStream), 'application/x-ndjson', length);
      } else {
        const spooled = await spoolBody(c.req.raw.body, { maxBytes: deps.maxBatchBytes, tooLarge, what: 'batch' });
        try {
          if (spooled.bytes === 0) throw new ApiError(400, 'empty_batch', 'the body is empty; send JSONL, one {"custom_id": "…", "input": {…}} per line');
          await deps.store.put(key, createReadStream(spooled.file), 'application/x-ndjson', spooled.bytes);
        } finally {
          await spooled.dispose();
        }
      }
      inputUri = deps.store.uri(key);
    } else {
      const parsed = FromUri.safeParse(await readJson(c, deps.maxJsonDepth));
      if (!parsed.success) throw new ApiError(400, 'invalid_request', `${z.prettifyError(parsed.error)} — send JSONL with ?function=NAME, or JSON {"function": "NAME", "input_uri": "s3://bucket/input.jsonl"}`);
      fn = parsed.data.function;
      inputUri = parsed.data.input_uri;
      owner = await mustExist(c, fn);
      const { bucket } = parseS3Uri(inputUri);
      const head = await deps.store.head(inputUri).catch((err: unknown) => {
        throw new ApiError(400, 'input_unreadable', `cannot read ${inputUri} (${statusOf(err) ?? (err as Error).message}); is bucket "${bucket}" reachable with the platform's S3 credentials?`);
      });
      if (!head) throw new ApiError(400, 'input_not_found', `${inputUri} does not exist`);
    }
    await deps.batches.create({ id, fn, tenant: owner, key: c.get('auth').keyId, inputUri });
    await announce(id);
    const created = await deps.batches.view(id, deps.publicUrl);
    c.header('location', created!.view.urls.self);
    return c.json(created!.view, 201);
  });

  app.get('/', async (c) => {
    requireScope(c, 'run');
    const given = c.req.query('limit');
    const limit = given === undefined ? 20 : Number(given);
    if (!Number.isInteger(limit) || limit < 1 || limit > 100) throw new ApiError(400, 'invalid_request', `limit must be a whole number from 1 to 100, got "${given}"`);
    const auth = c.get('auth');
    const all = await deps.batches.list(deps.publicUrl, auth.admin ? limit : 1000);
    return c.json({ data: all.filter((b) => canAccess(auth, b.tenant)).slice(0, limit).map((b) => b.view) });
  });

  const find = async (c: Context<GatewayEnv>, id: string): Promise<BatchView> => {
    requireScope(c, 'run');
    // A malformed id is as unknown as a missing one, and never becomes a Redis key.
    const found = BATCH_ID.test(id) ? await deps.batches.view(id, deps.publicUrl) : null;
    if (!found || !canAccess(c.get('auth'), found.tenant)) throw new ApiError(404, 'batch_not_found', `no batch ${id}; \`embers batch list\` shows recent ones`);
    return found.view;
  };

  app.get('/:id', async (c) => c.json(await find(c, c.req.param('id'))));

  for (const file of ['output', 'errors'] as const) {
    app.get(`/:id/${file}`, async (c) => {
      const b = await find(c, c.req.param('id'));
      const uri = file === 'output' ? b.outputUri : b.errorsUri;
      if (!uri) {
        const done = b.request_counts.completed + b.request_counts.failed;
        throw new ApiError(409, 'batch_not_finished', `batch ${b.id} is ${b.status} (${done}/${b.request_counts.total} lines done); its ${file} file is written when it finishes`);
      }
      const stream = await deps.store.stream(uri);
      c.header('content-type', 'application/x-ndjson');
      return c.body(Readable.toWeb(stream) as ReadableStream);
    });
  }

  app.post('/:id/cancel', async (c) => {
    const id = c.req.param('id');
    await find(c, id);
    const moved = await deps.batches.transition(id, ['validating', 'in_progress'], { status: 'cancelling', cancellingAt: new Date().toISOString() });
    if (moved === null) throw new ApiError(404, 'batch_not_found', `no batch ${id}`);
    if (moved !== 'ok' && moved !== 'cancelling') throw new ApiError(409, 'batch_finished', `batch ${id} is ${moved}; only validating or in_progress batches can be cancelled`);
    await announce(id);
    return c.json(await find(c, id));
  });
  return app;
}
