// A `ctx.log` line as user code sends it and the tail takes it: its level, message and fields,
// each bounded. Apart from core/tail.ts (the Redis stream) so that the user-code side can import
// it without reaching Redis (test/unit/trust-boundary.test.ts).

/** Longest message of a log line, and longest JSON of its fields (characters): the rest is cut. */
export const TAIL_MAX_MSG_CHARS = 2048;
export const TAIL_MAX_FIELDS_CHARS = 6144;
export const TAIL_LEVELS = ['trace', 'debug', 'info', 'warn', 'error', 'fatal'] as const;
export type TailLevel = (typeof TAIL_LEVELS)[number];

/** What a handler logged: its level, message and fields (the logger's bindings and the object it was given). */
export interface LogCall {
  level: TailLevel;
  msg: string;
  fields?: Record<string, unknown>;
  /** When it was logged (ms since epoch). */
  time: number;
}

/** Where a log line that belongs to no request was logged: a starting replica's `setup` or `warmup`. */
export type StartPhase = 'setup' | 'warmup';

export const START_PHASES: readonly StartPhase[] = ['setup', 'warmup'];

/**
 * A log call as the tail takes it, whoever sent it (the user code is not trusted): a known level,
 * a string message and a plain object of fields, each cut to its bound; undefined if it is not one.
 * Fields whose JSON is too long are kept as `{ truncated: <the start of that JSON> }`; fields
 * that cannot be serialised as `{ unserializable: <why> }`.
 */
export function capLogCall(raw: unknown): LogCall | undefined {
  const c = raw as Partial<LogCall> | null;
  if (typeof c !== 'object' || c === null || !TAIL_LEVELS.includes(c.level as TailLevel) || typeof c.msg !== 'string') return undefined;
  const time = typeof c.time === 'number' && Number.isFinite(c.time) ? c.time : Date.now();
  const msg = c.msg.length > TAIL_MAX_MSG_CHARS ? `${c.msg.slice(0, TAIL_MAX_MSG_CHARS)}…` : c.msg;
  const call: LogCall = { level: c.level as TailLevel, msg, time };
  if (typeof c.fields === 'object' && c.fields !== null && !Array.isArray(c.fields) && Object.keys(c.fields).length) {
    const json = safeJson(c.fields);
    // As its JSON reads back: plain data, whatever the handler passed (a cycle, a class, a BigInt).
    const back = json.length <= TAIL_MAX_FIELDS_CHARS ? (JSON.parse(json) as unknown) : undefined;
    call.fields = back === undefined ? { truncated: `${json.slice(0, TAIL_MAX_FIELDS_CHARS)}…` } : typeof back === 'object' && back !== null && !Array.isArray(back) ? (back as Record<string, unknown>) : { value: back };
  }
  return call;
}

/** JSON of a handler's fields; one that cannot be serialised (a cycle, a BigInt) says so. */
export function safeJson(v: unknown): string {
  try {
    return JSON.stringify(v) ?? 'null';
  } catch (err) {
    return JSON.stringify({ unserializable: (err as Error).message });
  }
}
