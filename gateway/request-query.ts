// Reading a request's query string with the zod schema its route declares (the same schema
// describes it in the OpenAPI document), answering 400 with what was wrong and what was sent.
import type { Context } from 'hono';
import { z } from 'zod';
import { ApiError } from './errors.ts';

/**
 * The query as `schema` reads it, or 400 `code` naming each mistake with the value sent, then
 * `hint` (what the parameters are).
 */
export function readQuery<T extends z.ZodType>(c: Context, schema: T, code = 'invalid_request', hint?: string): z.output<T> {
  const raw = c.req.query();
  const parsed = schema.safeParse(raw);
  if (parsed.success) return parsed.data;
  const mistakes = parsed.error.issues.map((issue) => {
    const field = issue.path[0];
    const sent = typeof field === 'string' ? raw[field] : undefined;
    return sent === undefined ? issue.message : `${issue.message}, got "${sent.slice(0, 100)}"`;
  });
  throw new ApiError(400, code, `${mistakes.join('; ')}${hint ? ` — ${hint}` : ''}`, parsed.error.issues);
}

/** `?limit=`: a whole number from 1 to `max`, `fallback` when left out. */
export function limitParam(max: number, fallback: number) {
  const error = `limit must be a whole number from 1 to ${max}`;
  return z.coerce.number({ error }).int({ error }).min(1, { error }).max(max, { error }).default(fallback).describe(`how many to list, newest first (1–${max})`);
}
