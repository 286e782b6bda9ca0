// Request body limits, answered 413 with our error contract. Hono's bodyLimit reads
// `c.req.raw.body`, which makes @hono/node-server build a full web Request (an undici Request, a
// ReadableStream and an AbortSignal) for every request, a tenth of the gateway's CPU on small
// runs in its profile. A body that declares its length is judged by the header alone (Node's
// HTTP parser never delivers more than it declares); only chunked bodies are counted as they
// stream, through Hono's middleware.
import type { MiddlewareHandler } from 'hono';
import { bodyLimit } from 'hono/body-limit';
import { ApiError } from '../errors.ts';

export function limitBody(maxSize: number, message: string): MiddlewareHandler {
  const tooLarge = () => {
    throw new ApiError(413, 'too_large', message);
  };
  const counted = bodyLimit({ maxSize, onError: tooLarge });
  return async function limitBody(c, next) {
    if (c.req.method === 'GET' || c.req.method === 'HEAD') return next();
    const length = c.req.header('content-length');
    if (length === undefined || c.req.header('transfer-encoding') !== undefined) return counted(c, next);
    if (Number(length) > maxSize) tooLarge();
    await next();
  };
}
