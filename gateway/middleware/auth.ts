import { createHash, timingSafeEqual } from 'node:crypto';
import type { MiddlewareHandler } from 'hono';
import { ApiError } from '../errors.ts';

const digest = (s: string) => createHash('sha256').update(s).digest();

/** Bearer-key auth for /v1; digests make the comparison constant-time whatever the length. */
export function bearerAuth(apiKey: string): MiddlewareHandler {
  const expected = digest(apiKey);
  return async function auth(c, next) {
    const header = c.req.header('authorization');
    if (!header) throw new ApiError(401, 'unauthorized', 'missing "Authorization: Bearer <key>" header (npm start prints the key)');
    const m = /^Bearer\s+(\S+)$/i.exec(header);
    if (!m) throw new ApiError(401, 'unauthorized', 'Authorization header must be "Bearer <key>"');
    if (!timingSafeEqual(digest(m[1]), expected)) throw new ApiError(401, 'unauthorized', 'invalid API key');
    await next();
  };
}
