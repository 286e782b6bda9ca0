// /v1/batches — bulk batch jobs (anchor: the OpenAI Batch API). The gateway stores the input
// in S3 and the record in Redis; the feeder in the leading scheduler does the rest.
import { Readable } from 'node:stream';
import { Hono, type Context } from 'hono';
import { canAccess } from '../../core/tenants.ts';
import { actingTenant, requireScope } from '../middleware/auth.ts';
import { z } from 'zod';
import { BATCH_ID, BatchStore, type BatchView } from '../../core/batches.ts';
import { FunctionName, s3Keys, type PlatformEvent } from '../../core/contracts.ts';
import { checkS3Uri, statusOf } from '../../core/s3.ts';
import { ApiError, functionNotFound } from '../errors.ts';
import { readJson } from '../request-body.ts';
import { limitBody } from '../middleware/body-limit.ts';
import { headOwned } from '../owned-objects.ts';
import { storeBody } from '../spool.ts';
import type { GatewayDeps, GatewayEnv } from '../deps.ts';
import { keys } from '../../core/keys.ts';
import { limitParam, readQuery } from '../request-query.ts';
import { jsonLines, type RouteGroup } from '../openapi/operation.ts';

const FromInput = z
  .object({
    function: FunctionName.describe('the function to run on each line'),
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

const CreateQuery = z.object({
  function: z.string().optional().describe('with a JSONL body: the function to run on each line (without it, the body is JSON `{ function, input_file_id | input_uri }`)'),
});

const ListQuery = z.object({ limit: limitParam(100, 20) });

const BatchParams = z.object({ id: z.string().regex(BATCH_ID).describe('`batch_…`') });

/** BatchView (core/batches.ts) as the API answers it. */
const BatchSchema = z
  .object({
    id: z.string(),
    object: z.literal('batch'),
    function: z.string(),
    status: z.enum(['validating', 'in_progress', 'finalizing', 'completed', 'failed', 'cancelling', 'cancelled']),
    inputUri: z.string(),
    outputUri: z.string().optional(),
    errorsUri: z.string().optional(),
    request_counts: z.object({ total: z.number().int(), completed: z.number().int(), failed: z.number().int() }),
    createdAt: z.string(),
    inProgressAt: z.string().optional(),
    finalizingAt: z.string().optional(),
    completedAt: z.string().optional(),
    failedAt: z.string().optional(),
    cancellingAt: z.string().optional(),
    cancelledAt: z.string().optional(),
    error: z.string().optional().describe('why the batch failed as a whole'),
    paused: z
      .object({ code: z.literal('budget_exhausted'), message: z.string(), since: z.string() })
      .optional()
      .describe('while in progress: why no more lines are queued for now (those queued still run); it resumes by itself'),
    urls: z.object({ self: z.string(), output: z.string(), errors: z.string() }),
  })
  .meta({ id: 'Batch' });

export function batchRoutes(deps: GatewayDeps) {
  const app = new Hono<GatewayEnv>();
  const announce = (id: string) => deps.redis.publish(keys.registryChannel, JSON.stringify({ type: 'batch', id } satisfies PlatformEvent));

  /** The acting tenant's function `name`: its key (what the batch records) and owner. */
  const mustExist = async (c: Context<GatewayEnv>, name: string): Promise<{ key: string; owner: string }> => {
    const found = FunctionName.safeParse(name).success ? await deps.functions.find(actingTenant(c), name) : null;
    if (!found) throw functionNotFound(name, 'batch');
    // Before its input is read: a tenant out of budget starts no batch (the lines of one begun still run).
    await deps.budgets.check(found.fn.tenant);
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
    const fnParam = readQuery(c, CreateQuery).function;
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
    const { limit } = readQuery(c, ListQuery);
    const auth = c.get('auth');
    const all = await deps.batches.list(deps.publicUrl, auth.admin ? limit : 1000);
    return c.json({ data: all.filter((b) => canAccess(auth, b.tenant)).slice(0, limit).map((b) => b.view) });
  });

  const find = async (c: Context<GatewayEnv>, id: string): Promise<BatchView> => {
    requireScope(c, 'run');
    // A malformed id is as unknown as a missing one, and never becomes a Redis key.
    const found = BatchParams.shape.id.safeParse(id).success ? await deps.batches.view(id, deps.publicUrl) : null;
    if (!found || !canAccess(c.get('auth'), found.tenant)) throw new ApiError(404, 'batch_not_found', `no batch ${id}; \`embers batch list\` shows recent ones`);
    return found.view satisfies z.output<typeof BatchSchema>;
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

const NOT_FOUND = { 404: '`batch_not_found` (none, or another tenant\'s)' };
const batchAnswer = (description: string) => ({ description, content: { 'application/json': BatchSchema } });

export const batchOperations: RouteGroup = {
  tag: 'batches',
  description: 'Bulk batches (as the OpenAI Batch API): one input per JSONL line, run behind live traffic, results in JSONL files.',
  operations: [
    {
      method: 'post',
      path: '/',
      id: 'createBatch',
      summary: 'Create a batch',
      description: 'The JSONL in the body with `?function=` (up to EMBERS_MAX_BATCH_BYTES), or JSON naming a file from `POST /v1/files` or an `s3://` object of the tenant\'s.',
      access: 'run',
      actsForTenant: true,
      query: CreateQuery,
      body: {
        content: {
          'application/json': FromInput,
          'application/x-ndjson': jsonLines('with `?function=`: one `{ "custom_id": "…", "input": {…} }` per line'),
        },
      },
      responses: { 201: { ...batchAnswer('created; the batch feeder validates and runs it'), headers: { location: 'the batch\'s URL' } } },
      errors: {
        400: '`invalid_request`, `empty_batch`, `input_not_found`, `input_unreadable`, `invalid_json`',
        404: '`function_not_found`',
        413: '`too_large`: over EMBERS_MAX_BATCH_BYTES (JSONL) or EMBERS_MAX_BODY_BYTES (JSON)',
        429: '`budget_exhausted`: the tenant reached a monthly budget; Retry-After is the seconds to the end of the UTC month',
      },
    },
    {
      method: 'get',
      path: '/',
      id: 'listBatches',
      summary: 'List batches',
      access: 'run',
      query: ListQuery,
      responses: { 200: { description: 'the latest batches the key may see', content: { 'application/json': z.object({ data: z.array(BatchSchema) }) } } },
      errors: { 400: '`invalid_request`: limit is not a whole number from 1 to 100' },
    },
    { method: 'get', path: '/:id', id: 'getBatch', summary: 'Show a batch', access: 'run', params: BatchParams, responses: { 200: batchAnswer('the batch') }, errors: NOT_FOUND },
    ...(['output', 'errors'] as const).map((file) => ({
      method: 'get' as const,
      path: `/:id/${file}`,
      id: file === 'output' ? 'getBatchOutput' : 'getBatchErrors',
      summary: file === 'output' ? 'A finished batch\'s output' : 'A finished batch\'s failed lines',
      access: 'run' as const,
      params: BatchParams,
      responses: { 200: { description: 'JSONL', content: { 'application/x-ndjson': jsonLines(file === 'output' ? '`{ "custom_id", "output" }` per line' : '`{ "custom_id", "line", "error" }` per line') } } },
      errors: { ...NOT_FOUND, 409: '`batch_not_finished`' },
    })),
    {
      method: 'post',
      path: '/:id/cancel',
      id: 'cancelBatch',
      summary: 'Cancel a batch',
      access: 'run',
      params: BatchParams,
      responses: { 200: batchAnswer('cancelling: lines not started are not run') },
      errors: { ...NOT_FOUND, 409: '`batch_finished`: only validating or in_progress batches can be cancelled' },
    },
  ],
};
