// Model uploads by content hash: PUT /v1/models/sha256/:hex streams the file to S3 once;
// HEAD tells the CLI it is already there. Each tenant has its own: a file is stored under the
// tenant's prefix (s3Keys.model), so HEAD never tells one tenant what another uploaded.
import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { Hono, type Context } from 'hono';
import { z } from 'zod';
import { s3Keys } from '../../core/contracts.ts';
import { ApiError } from '../errors.ts';
import type { GatewayDeps, GatewayEnv } from '../deps.ts';
import { actingTenant, requireScope } from '../middleware/auth.ts';
import { spoolBody } from '../spool.ts';
import { bytes, type RouteGroup } from '../openapi/operation.ts';

const MAX_MODEL_BYTES = 8 * 1024 ** 3;

const ModelParams = z.object({
  hex: z.string().regex(/^[0-9a-f]{64}$/, 'model ids are the lower-case hex sha256 of the file (64 characters)').describe('the file\'s sha256, lower-case hex'),
});

const ModelSchema = z.object({ uri: z.string().describe('`s3://…`: what a deploy\'s `models` names'), bytes: z.number().int() });

export function modelRoutes(deps: GatewayDeps) {
  const app = new Hono<GatewayEnv>();
  const { store } = deps;
  // Model files are only ever needed to deploy.
  app.use('*', async (c, next) => {
    requireScope(c, 'deploy');
    await next();
  });

  const keyOf = (c: Context<GatewayEnv>) => {
    const parsed = ModelParams.safeParse(c.req.param());
    if (!parsed.success) throw new ApiError(400, 'invalid_hash', parsed.error.issues[0].message);
    return s3Keys.model(actingTenant(c), parsed.data.hex);
  };

  app.on('HEAD', '/sha256/:hex', async (c) => {
    const head = await store.head(keyOf(c));
    return c.body(null, head ? 200 : 404);
  });

  app.get('/sha256/:hex', async (c) => {
    const key = keyOf(c);
    const head = await store.head(key);
    if (!head) throw new ApiError(404, 'model_not_found', 'no model with that sha256');
    return c.json({ uri: store.uri(key), bytes: head.size } satisfies z.output<typeof ModelSchema>);
  });

  app.put('/sha256/:hex', async (c) => {
    const hex = c.req.param('hex');
    const key = keyOf(c);
    const declared = Number(c.req.header('content-length') ?? NaN);
    // Judged by the header when there is one, before anything is written to disk.
    if (declared > MAX_MODEL_BYTES) throw new ApiError(413, 'too_large', `model is ${declared} bytes, over ${MAX_MODEL_BYTES}`);
    const body = c.req.raw.body;
    if (!body) throw new ApiError(400, 'empty_body', 'send the model file as the request body');
    const hash = createHash('sha256');
    const spooled = await spoolBody(body, { maxBytes: MAX_MODEL_BYTES, tooLarge: () => new ApiError(413, 'too_large', `model is over ${MAX_MODEL_BYTES} bytes`), onChunk: (chunk) => hash.update(chunk), what: 'model' });
    try {
      if (spooled.bytes === 0) throw new ApiError(400, 'empty_body', 'model file is empty');
      const actual = hash.digest('hex');
      if (actual !== hex) throw new ApiError(400, 'hash_mismatch', `body sha256 is ${actual}, not ${hex}: the upload was corrupted or the id is wrong`);
      await store.put(key, createReadStream(spooled.file), 'application/octet-stream', spooled.bytes);
      return c.json({ uri: store.uri(key), bytes: spooled.bytes } satisfies z.output<typeof ModelSchema>, 201);
    } finally {
      await spooled.dispose();
    }
  });

  return app;
}

const BAD_HASH = { 400: '`invalid_hash`: not 64 lower-case hex characters' };

export const modelOperations: RouteGroup = {
  tag: 'models',
  description: 'Model files by content hash, each tenant its own (`embers models upload`; `embers deploy` uploads a handler\'s local models).',
  operations: [
    { method: 'head', path: '/sha256/:hex', id: 'hasModel', summary: 'Whether a model file is uploaded', access: 'deploy', actsForTenant: true, params: ModelParams, responses: { 200: { description: 'uploaded' }, 404: { description: 'not uploaded' } }, errors: BAD_HASH },
    { method: 'get', path: '/sha256/:hex', id: 'getModel', summary: 'Where a model file is', access: 'deploy', actsForTenant: true, params: ModelParams, responses: { 200: { description: 'uploaded', content: { 'application/json': ModelSchema } } }, errors: { ...BAD_HASH, 404: '`model_not_found`' } },
    {
      method: 'put',
      path: '/sha256/:hex',
      id: 'uploadModel',
      summary: 'Upload a model file',
      description: `The ONNX file as the body, up to ${MAX_MODEL_BYTES} bytes; its sha256 must be the path's.`,
      access: 'deploy',
      actsForTenant: true,
      params: ModelParams,
      body: { content: { 'application/octet-stream': bytes('the model file') } },
      responses: { 201: { description: 'stored', content: { 'application/json': ModelSchema } } },
      errors: { 400: '`invalid_hash`, `empty_body`, `hash_mismatch` (the body\'s sha256 is another)', 413: '`too_large`' },
    },
  ],
};
