// Model uploads by content hash: PUT /v1/models/sha256/:hex streams the file to S3 once;
// HEAD tells the CLI it is already there.
import { createHash } from 'node:crypto';
import { createReadStream, createWriteStream } from 'node:fs';
import { mkdtemp, rm, stat } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Readable, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { ReadableStream as WebReadableStream } from 'node:stream/web';
import { Hono } from 'hono';
import { s3Keys } from '../../core/contracts.ts';
import { ApiError } from '../errors.ts';
import type { GatewayDeps, GatewayEnv } from '../app.ts';
import { requireScope } from '../middleware/auth.ts';

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

  const keyOf = (hex: string) => {
    if (!SHA256.test(hex)) throw new ApiError(400, 'invalid_hash', 'model ids are the lower-case hex sha256 of the file (64 characters)');
    return s3Keys.model(hex);
  };

  app.on('HEAD', '/sha256/:hex', async (c) => {
    const head = await store.head(keyOf(c.req.param('hex')));
    return c.body(null, head ? 200 : 404);
  });

  app.get('/sha256/:hex', async (c) => {
    const key = keyOf(c.req.param('hex'));
    const head = await store.head(key);
    if (!head) throw new ApiError(404, 'model_not_found', 'no model with that sha256');
    return c.json({ uri: store.uri(key), bytes: head.size });
  });

  app.put('/sha256/:hex', async (c) => {
    const hex = c.req.param('hex');
    const key = keyOf(hex);
    const declared = Number(c.req.header('content-length') ?? NaN);
    // Judged by the header when there is one, before anything is written to disk.
    if (declared > MAX_MODEL_BYTES) throw new ApiError(413, 'too_large', `model is ${declared} bytes, over ${MAX_MODEL_BYTES}`);
    const body = c.req.raw.body;
    if (!body) throw new ApiError(400, 'empty_body', 'send the model file as the request body');
    const dir = await mkdtemp(path.join(os.tmpdir(), 'embers-upload-'));
    const file = path.join(dir, 'model');
    try {
      const hash = createHash('sha256');
      let bytes = 0;
      const meter = new Transform({
        transform(chunk: Buffer, _enc, done) {
          bytes += chunk.length;
          if (bytes > MAX_MODEL_BYTES) return done(new ApiError(413, 'too_large', `model is over ${MAX_MODEL_BYTES} bytes`));
          hash.update(chunk);
          done(null, chunk);
        },
      });
      await pipeline(Readable.fromWeb(body as WebReadableStream), meter, createWriteStream(file)).catch((err: NodeJS.ErrnoException) => {
        if (err.code === 'ENOSPC') throw new ApiError(507, 'insufficient_storage', `the gateway's temporary folder (${os.tmpdir()}) is full; free space there or upload a smaller model`);
        throw err;
      });
      if (bytes === 0) throw new ApiError(400, 'empty_body', 'model file is empty');
      const actual = hash.digest('hex');
      if (actual !== hex) throw new ApiError(400, 'hash_mismatch', `body sha256 is ${actual}, not ${hex}: the upload was corrupted or the id is wrong`);
      await store.put(key, createReadStream(file), 'application/octet-stream', (await stat(file)).size);
      return c.json({ uri: store.uri(key), bytes }, 201);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  return app;
}
