// Reading request bodies: JSON (parsed, bounded in depth, a parse error answered 400) and bytes,
// taken straight from Node's request stream where that saves Hono's copies.
import type { IncomingMessage } from 'node:http';
import type { Context } from 'hono';
import { nestsDeeperThan, tooDeepMessage } from '../core/json-depth.ts';
import { ApiError } from './errors.ts';

/**
 * A body that declared its length and that nothing has read yet (no reader attached, no
 * encoding set): Node's request stream and that length. Node's parser never delivers more than
 * declared, and the body limit was judged by the header (middleware/body-limit.ts).
 */
function untouchedBody(c: Context): { incoming: IncomingMessage; length: number } | undefined {
  const incoming = (c.env as { incoming?: IncomingMessage } | undefined)?.incoming;
  const declared = incoming?.headers['content-length'];
  if (!incoming || declared === undefined || incoming.headers['transfer-encoding'] !== undefined) return undefined;
  if (incoming.readableDidRead || incoming.readableFlowing || incoming.readableEncoding) return undefined;
  const length = Number(declared);
  return Number.isSafeInteger(length) ? { incoming, length } : undefined;
}

/**
 * The body, taken at once when Node's HTTP parser already holds all of it (it declared its length
 * and arrived with the headers, as a small request's does, and nothing has read it); undefined
 * otherwise. @hono/node-server's reader waits for the stream's data and end events instead.
 */
function bufferedBytes(c: Context): Buffer | undefined {
  const body = untouchedBody(c);
  if (!body || body.incoming.readableLength !== body.length) return undefined;
  const chunk = body.length === 0 ? null : (body.incoming.read() as Buffer | null);
  // Nothing more can come: let the stream end, so @hono/node-server finds it ended and does not
  // drain it after the response.
  body.incoming.resume();
  return chunk ?? EMPTY;
}

/** bufferedBytes as text. */
function bufferedBody(c: Context): string | undefined {
  const bytes = bufferedBytes(c);
  if (bytes === undefined) return undefined;
  // Decoded as @hono/node-server would (a leading byte order mark dropped), and cached where
  // Hono looks first (it keeps promises there, though typed otherwise), so a later c.req.text()
  // or json() gets it too.
  const text = UTF8.decode(bytes);
  (c.req.bodyCache as Record<string, Promise<unknown>>).text = Promise.resolve(text);
  return text;
}

const UTF8 = new TextDecoder();
const EMPTY = Buffer.alloc(0);

/**
 * The body's bytes as they came (a binary run: an image, audio). A body that declares its length
 * is read from the socket and joined once: one copy, where Hono's arrayBuffer() joins the chunks
 * and then copies them into an ArrayBuffer (two, each in memory touched afresh). A chunked body
 * goes through Hono, which counts it against the body limit.
 */
export async function readBytes(c: Context): Promise<Buffer> {
  const buffered = bufferedBytes(c);
  if (buffered) return buffered;
  const body = untouchedBody(c);
  if (!body) return Buffer.from(await c.req.arrayBuffer());
  const { incoming, length } = body;
  // Chunks as they arrive (nothing is set aside for bytes a caller only declared), one copy at the end.
  const chunks: Buffer[] = [];
  let at = 0;
  try {
    for await (const chunk of incoming) {
      chunks.push(chunk as Buffer);
      at += (chunk as Buffer).length;
    }
  } catch (err) {
    throw new ApiError(400, 'incomplete_body', `the request body ended after ${at} of ${length} bytes: ${(err as Error).message}`);
  }
  if (at < length) throw new ApiError(400, 'incomplete_body', `the request body ended after ${at} of ${length} bytes`);
  return chunks.length === 1 ? chunks[0] : Buffer.concat(chunks, at);
}

/**
 * Parses a JSON body, answering 400 with the parser's reason instead of a 500, and 400 `too_deep`
 * when it nests more than `maxDepth` arrays and objects (EMBERS_MAX_JSON_DEPTH).
 */
export async function readJson(c: Context, maxDepth: number): Promise<unknown> {
  return (await readJsonText(c, maxDepth)).value;
}

/** readJson, with the text it parsed (a run queues that text as it is: LiveQueue.add). */
export async function readJsonText(c: Context, maxDepth: number): Promise<{ value: unknown; text: string }> {
  const text = bufferedBody(c) ?? (await c.req.text());
  if (text.trim() === '') throw new ApiError(400, 'invalid_json', 'request body is empty; send a JSON object');
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    throw new ApiError(400, 'invalid_json', `request body is not valid JSON: ${(err as Error).message}`);
  }
  // V8 parses any depth without recursion; what walks the value later may not.
  if (nestsDeeperThan(value, maxDepth)) throw new ApiError(400, 'too_deep', tooDeepMessage('request body', maxDepth));
  return { value, text };
}
