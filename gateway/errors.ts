import { HTTPException } from 'hono/http-exception';
import type { ContentfulStatusCode } from 'hono/utils/http-status';
import type { Context } from 'hono';
import { errorBody } from '../core/contracts.ts';
import type { Logger } from '../core/log.ts';

/** An error whose status says whose fault it was (4xx caller, 503 overloaded, 500 us). */
export class ApiError extends Error {
  constructor(
    readonly status: ContentfulStatusCode,
    readonly code: string,
    message: string,
    readonly details?: unknown,
  ) {
    super(message);
    this.name = 'ApiError';
  }
}

/** The caller of a sync run closed its connection before its answer: nobody reads what is written (499, logged so). */
export class CallerGone extends Error {
  override name = 'CallerGone';
  constructor() {
    super('the caller went away before its answer');
  }
}

/** What a function_not_found message says after the name: why the name finds nothing, or what to do. */
const FUNCTION_NOT_FOUND_HINTS = {
  /** The name is one no function can have. */
  malformed: ' (names are lower-case letters, digits and "-")',
  /** A run named it. */
  run: '; deploy it with `embers deploy` or list them with `embers functions`',
  /** A batch named it: the function must exist before its batch is taken. */
  batch: '; deploy it first (`embers functions` lists them)',
  /** It was deleted after this gateway found it. */
  deleted: ': it was deleted',
} as const;

/**
 * 404 function_not_found for the plain name a caller gave: missing, another tenant's (told alike)
 * or malformed. `hint` adds the reason or next step that fits where it was named.
 */
export function functionNotFound(name: string, hint?: keyof typeof FUNCTION_NOT_FOUND_HINTS): ApiError {
  return new ApiError(404, 'function_not_found', `no function named "${name}"${hint ? FUNCTION_NOT_FOUND_HINTS[hint] : ''}`);
}

/**
 * Answers an error thrown by a route with its status and a body: Embers' ErrorBody, or `bodyOf`'s
 * shape for routes that speak another protocol's (the Open Inference Protocol's `{ error }`).
 */
export function onError(log: Logger, bodyOf: (code: string, message: string, details?: unknown) => unknown = errorBody) {
  return function handleError(err: Error, c: Context) {
    if (err instanceof ApiError) {
      // The unread rest of an oversized body is discarded with the connection: tell the client.
      if (err.status === 413) c.header('connection', 'close');
      const retryAfter = (err as { retryAfter?: number }).retryAfter;
      if (retryAfter !== undefined) c.header('retry-after', String(retryAfter));
      return c.json(bodyOf(err.code, err.message, err.details), err.status);
    }
    if (err instanceof CallerGone) return c.body(null, 499 as number as ContentfulStatusCode);
    if (err instanceof HTTPException) {
      const code = err.status === 413 ? 'too_large' : err.status === 401 ? 'unauthorized' : 'bad_request';
      return c.json(bodyOf(code, err.message || 'bad request'), err.status);
    }
    // The caller closed its connection before its body was all there: its mistake, not a crash of ours.
    if (isAbortedBody(err)) return c.json(bodyOf('incomplete_body', 'the request body ended before it was complete: the connection closed'), 400);
    if (isRedisDown(err)) {
      log.warn({ err: err.message, rid: c.get('rid') }, 'redis unavailable');
      return c.json(bodyOf('unavailable', 'the queue (Redis) is unreachable right now; retry shortly'), 503);
    }
    log.error({ err, rid: c.get('rid') }, 'unhandled error');
    return c.json(bodyOf('internal', `internal error (request id ${c.get('rid') ?? 'unknown'})`), 500);
  };
}

/** ioredis failures that mean "Redis is not there", as opposed to a bug of ours. */
export function isRedisDown(err: unknown): boolean {
  const e = err as { name?: string; message?: string; code?: string };
  return (
    e?.name === 'MaxRetriesPerRequestError' ||
    e?.code === 'ECONNREFUSED' ||
    /Stream isn't writeable|Connection is closed|enableOfflineQueue/.test(e?.message ?? '')
  );
}

/** Node's error for a request whose connection closed before its body ended (as read by Hono or by us). */
function isAbortedBody(err: unknown): boolean {
  const e = err as { code?: string; message?: string };
  return e?.code === 'ECONNRESET' && e.message === 'aborted';
}

export function notFound(c: Context) {
  return c.json(errorBody('not_found', `no route for ${c.req.method} ${c.req.path}; the API lives under /v1 (see README)`), 404);
}
