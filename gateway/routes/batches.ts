// /v1/batches — bulk batch jobs (anchor: the OpenAI Batch API). The gateway stores the input
// in S3 and the record in Redis; the feeder in the leading scheduler does the rest.
import { Readable } from 'node:stream';
import { Hono, type Context } from 'hono';
import { canAccess } from '../../core/tenants.ts';
import { actingTenant, requireScope } from '../middleware/auth.ts';
import { z } from 'zod';
import { BATCH_ID, BatchStore, type BatchView } from '../../core/batches.ts';
import { FUNCTION_NAME, s3Keys, type PlatformEvent } from '../../core/contracts.ts';
import { checkS3Uri, statusOf } from '../../core/s3.ts';
import { ApiError, functionNotFound } from '../errors.ts';
import { readJson } from '../request-body.ts';
import { limitBody } from '../middleware/body-limit.ts';
import { headOwned } from '../owned-objects.ts';
import { storeBody } from '../spool.ts';
import type { GatewayDeps, GatewayEnv } from '../deps.ts';
import { keys } from '../../core/keys.ts';

const FromInput = z
  .object({
    function: z.string().regex(FUNCTION_NAME, 'function must be a deployed function name'),
    input_uri: z
      .string()
      .superRefine((uri, ctx) => {
        const loc = checkS3Uri(uri);
        if ('problem' in loc) ctx.addIssue({ code: 'custom', message: loc.problem });
      })
      .optional(),
    input_file_id: z.string().optional(),
  })
  .refine((b) => (b.input_uri === undefined) !== (b.input_file_id === undefined), { message: 'give one of input_uri (s3://bucket/key.jsonl) and input_file_id (a file_… from POST /v1/files)', path: ['input_uri'] });

export function batchRoutes(deps: GatewayDeps) {
  const app = new Hono<GatewayEnv>();
  const announce = (id: string) => deps.redis.publish(keys.registryChannel, JSON.stringify({ type: 'batch', id } satisfies PlatformEvent));

  /** The acting tenant's function `name`: its key (what the batch records) and owner. */
  const mustExist = async (c: Context<GatewayEnv>, name: string): Promise<{ key: string; owner: string }> => {
    const found = FUNCTION_NAME.test(name) ? await deps.functions.find(actingTenant(c), name) : null;
    if (!found) throw functionNotFound(name, 'batch');
    return { key: found.key, owner: found.fn.tenant };
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
      ({ key: fn, owner } = await mustExist(c, fnParam));
      const key = s3Keys.batchInput(owner, id);
      const empty = () => new ApiError(400, 'empty_batch', 'the body is empty; send JSONL, one {"custom_id": "…", "input": {…}} per line');
      await storeBody(deps.store, key, c.req.raw.body, Number(c.req.header('content-length') ?? NaN), { maxBytes: deps.maxBatchBytes, tooLarge, empty, what: 'batch', contentType: 'application/x-ndjson' });
      inputUri = deps.store.uri(key);
    } else {
      const parsed = FromInput.safeParse(await readJson(c, deps.maxJsonDepth));
      if (!parsed.success) throw new ApiError(400, 'invalid_request', `${z.prettifyError(parsed.error)} — send JSONL with ?function=NAME, or JSON {"function": "NAME", "input_file_id": "file_…"} or {"function": "NAME", "input_uri": "s3://bucket/input.jsonl"}`);
      ({ key: fn, owner } = await mustExist(c, parsed.data.function));
      const { input_uri: uri, input_file_id: fileId } = parsed.data;
      if (fileId !== undefined) {
        // Another tenant's file is as unknown as a missing one.
        const file = await deps.files.get(fileId);
        if (!file || file.tenant !== owner) throw new ApiError(400, 'input_not_found', `no file ${fileId.slice(0, 100)}; \`embers files list\` shows yours`);
        inputUri = file.uri;
      } else {
        inputUri = uri!;
        const head = await headOwned(deps, owner, inputUri, 'input_uri').catch((err: unknown) => {
          if (err instanceof ApiError) throw err;
          const own = inputUri.startsWith(`s3://${deps.store.bucket}/`);
          throw new ApiError(400, 'input_unreadable', `cannot read ${inputUri} (${statusOf(err) ?? (err as Error).message}); ${own ? "is the platform's S3 reachable?" : 'do the bucket\'s registered credentials still read it (`embers buckets add` replaces them)?'}`);
        });
        if (!head) throw new ApiError(400, 'input_not_found', `${inputUri} does not exist`);
      }
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
