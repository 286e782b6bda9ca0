// A live queue entry's fields (core/live-queue.ts): the job as JSON in field `d`, a binary body
// in field `b`, and a part of 16 KiB or more (the body, else the input) kept beside the entry
// under a key of its own, which field `s` says is there (decisions/042).
import { randomUUID } from 'node:crypto';
import type { Redis } from 'ioredis';
import type { RunJobData } from './contracts.ts';
import { newSpillKey, spillKey } from './keys.ts';

/**
 * Stream entries carry the job data as JSON in field `d`, and a binary request body as it came
 * in field `b` (data.raw names the input field it fills). Given `inputJson`, the JSON text
 * `data.input` was parsed from, that text is spliced in as the input instead of stringifying the
 * value again: parsing it gives the replica what the gateway parsed (and validated).
 */
export function encodeLiveJob(data: RunJobData, inputJson?: string): string {
  if (inputJson === undefined) return JSON.stringify(data);
  // JSON.stringify leaves out undefined members; padding around the body is not worth keeping.
  const rest = JSON.stringify({ ...data, input: undefined });
  return `${rest.length > 2 ? `${rest.slice(0, -1)},` : '{'}"input":${inputJson.trim()}}`;
}

/**
 * How long a sync run's large part outlives its deadline to start: past the longest a handler may
 * run (an hour), so a run taken over late still finds it.
 */
const SPILL_GRACE_MS = 70 * 60_000;

/** How long a large part is kept: a sync run's until its deadline (past it, the run is answered unrun), else `keepAsyncMs`. */
export function spillKeepMs(data: RunJobData, keepAsyncMs: number): number {
  return data.deadline ? Math.max(0, data.deadline - Date.now()) + SPILL_GRACE_MS : keepAsyncMs;
}

/** The entry's fields, and its large part when one is queued apart (SPILL_MIN_BYTES): the binary body, else the input JSON. */
export function liveFields(data: RunJobData, inputJson?: string, body?: Buffer): { fields: (string | Buffer)[]; spilled?: string | Buffer } {
  if (body && body.length >= SPILL_MIN_BYTES) return { fields: ['d', encodeLiveJob(data, inputJson), SPILLED, 'b'], spilled: body };
  const fields: (string | Buffer)[] = [];
  let spilled: string | undefined;
  // Length in UTF-16 units: at most the byte length, so a part near the line may stay in.
  if (inputJson !== undefined && inputJson.length >= SPILL_MIN_BYTES) {
    fields.push('d', JSON.stringify({ ...data, input: undefined }), SPILLED, 'i');
    spilled = inputJson;
  } else fields.push('d', encodeLiveJob(data, inputJson));
  if (body) fields.push('b', body);
  return { fields, spilled };
}

/**
 * A binary body or input JSON of at least this many bytes is queued beside its entry, under a key
 * of its own (spillKey), not in it: every argument of a Lua call is hashed byte by byte as Redis
 * interns it (~170 µs for 110 KB), where a plain SET of the same bytes costs a copy.
 */
export const SPILL_MIN_BYTES = 16 * 1024;

/**
 * Writes a large part under a new key (newSpillKey) for the script sent next on the same
 * connection to rename or remove, and returns that key. A failed write leaves the script without
 * it: the script says so (a damaged entry, a lost result).
 */
export function writeSpill(redis: Redis, value: string | Buffer, keepMs: number): string {
  const key = newSpillKey(randomUUID());
  redis.set(key, value, 'PX', Math.max(1, Math.ceil(keepMs))).catch(() => {});
  return key;
}

/**
 * A stream entry as replicas read it: its fields as Buffers, never as text, because a binary
 * request body (field `b`) would not survive decoding as UTF-8.
 */
export type LiveEntry = [id: string, fields: Buffer[]];

/** Field `s` of an entry whose large part waits under spillKey: `b` (its binary body) or `i` (its input JSON). */
const SPILLED = 's';

/**
 * The entries with their large parts fetched (one MGET for all) and put in place: as field `b`,
 * or as field `i` for an input. One gone (expired) is left out, and decodeLiveJob marks the job damaged.
 */
export async function withSpilled(redis: Redis, fn: string, entries: LiveEntry[]): Promise<LiveEntry[]> {
  const spilled = entries.flatMap(([id, fields]) => {
    const part = spilledPart(fields);
    return part ? [{ id, fields, part }] : [];
  });
  if (!spilled.length) return entries;
  const parts = await fetchParts(redis, spilled.map((e) => spillKey(fn, e.id)));
  spilled.forEach((e, i) => {
    if (parts[i]) e.fields.push(Buffer.from(e.part), parts[i]!);
  });
  return entries;
}

/**
 * MGET of the parts, tried again on a short failure: the entries are this replica's already, and
 * left unrun they would be taken over later with a delivery counted as a crash.
 */
async function fetchParts(redis: Redis, keys: string[]): Promise<(Buffer | null)[]> {
  for (let attempt = 1; ; attempt++) {
    try {
      return (await redis.callBuffer('MGET', keys)) as (Buffer | null)[];
    } catch (err) {
      if (attempt >= 3) throw err;
      await new Promise((r) => setTimeout(r, 100 * attempt));
    }
  }
}

/** Whether an entry's fields say a part of it waits apart (field `s`), whether or not the entry can be read. */
export const hasSpilledPart = (fields: Buffer[]) => spilledPart(fields) !== undefined;

function spilledPart(fields: Buffer[]): 'b' | 'i' | undefined {
  for (let i = 0; i + 1 < fields.length; i += 2) if (fields[i].length === 1 && fields[i].toString() === SPILLED) return fields[i + 1].toString() === 'b' ? 'b' : 'i';
  return undefined;
}

/**
 * An entry's job (field `d`), with its input (field `i`, if it was queued apart) and its binary
 * body (field `b`, if any) set as `input[data.raw]`; `bodyMissing` set when `data.raw` names a
 * body the entry does not have, or its input was queued apart and is gone.
 */
export function decodeLiveJob(fields: Buffer[]): RunJobData | undefined {
  let d: Buffer | undefined;
  let b: Buffer | undefined;
  let input: Buffer | undefined;
  let spilled: string | undefined;
  for (let i = 0; i + 1 < fields.length; i += 2) {
    const name = fields[i].toString();
    if (name === 'd') d = fields[i + 1];
    else if (name === 'b') b = fields[i + 1];
    else if (name === 'i') input = fields[i + 1];
    else if (name === SPILLED) spilled = fields[i + 1].toString();
  }
  if (d === undefined) return undefined;
  const data = JSON.parse(d.toString()) as RunJobData;
  if (spilled === 'i') {
    if (input === undefined) data.bodyMissing = true;
    else data.input = JSON.parse(input.toString());
  }
  if (data.raw !== undefined) {
    if (data.bodyMissing) return data;
    if (typeof data.input !== 'object' || data.input === null) return undefined;
    // A damaged entry still names who waits for it: they get an answer, not silence.
    if (b === undefined) data.bodyMissing = true;
    else (data.input as Record<string, unknown>)[data.raw] = b;
  }
  return data;
}
