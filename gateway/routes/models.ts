// Model uploads by content hash: PUT /v1/models/sha256/:hex streams the file to S3 once;
// HEAD tells the CLI it is already there. Each tenant has its own: a file is stored under the
// tenant's prefix (s3Keys.model), so HEAD never tells one tenant what another uploaded.
import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { Hono, type Context } from 'hono';
import { s3Keys } from '../../core/contracts.ts';
import { ApiError } from '../errors.ts';
import type { GatewayDeps, GatewayEnv } from '../deps.ts';
import { actingTenant, requireScope } from '../middleware/auth.ts';
import { spoolBody } from '../spool.ts';

const SHA256 = /^[0-9a-f]{64}$/;
const MAX_MODEL_BYTES = 8 * 1024 ** 3;

export function modelRoutes(deps: GatewayDeps) {
  const app = new Hono<GatewayEnv>();
  const { store } = deps;
  // Model files are only ever needed to deploy.
  app.use('*', async (c, next) => {
    requireScope(c, 'deploy');
    await next();
  });

  const keyOf = (c: Context<GatewayEnv>) => {
    const hex = c.req.param('hex') ?? '';
    if (!SHA256.test(hex)) throw new ApiError(400, 'invalid_hash', 'model ids are the lower-case hex sha256 of the file (64 characters)');
    return s3Keys.model(actingTenant(c), hex);
  };

  app.on('HEAD', '/sha256/:hex', async (c) => {
    const head = await store.head(keyOf(c));
    return c.body(null, head ? 200 : 404);
  });

  app.get('/sha256/:hex', async (c) => {
    const key = keyOf(c);
    const head = await store.head(key);
    if (!head) throw new ApiError(404, 'model_not_found', 'no model with that sha256');
    return c.json({ uri: store.uri(key), bytes: head.size });
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
      return c.json({ uri: store.uri(key), bytes: spooled.bytes }, 201);
    } finally {
      await spooled.dispose();
    }
  });

  return app;
}
