// The user code's half of the tail: a request its replica marks tailed gets a `ctx.log` that also
// hands each line to the replica (over its channel), as pino would write it: level, message and fields,
// whatever the process's own log level. Lines are cut to their bounds here, before they cross,
// and a handler logging faster than LOG_LINES_PER_S has the rest dropped and counted.
import { format } from 'node:util';
import type { Logger } from '../../core/log.ts';
import { capLogCall, TAIL_LEVELS, type LogCall, type TailLevel } from '../../core/log-lines.ts';

/** Lines per second the process sends its replica, in bursts of as many. */
export const LOG_LINES_PER_S = 2000;

/** A token bucket of lines: `take` says whether one more may go now. */
export class LogBudget {
  private tokens: number;
  private at: number;

  constructor(
    private readonly perS = LOG_LINES_PER_S,
    private readonly now: () => number = () => performance.now(),
  ) {
    this.tokens = perS;
    this.at = now();
  }

  take(): boolean {
    const t = this.now();
    this.tokens = Math.min(this.perS, this.tokens + ((t - this.at) * this.perS) / 1000);
    this.at = t;
    if (this.tokens < 1) return false;
    this.tokens--;
    return true;
  }
}

/**
 * A log call's arguments as pino reads them: `(msg, ...args)`, `(obj, msg?, ...args)`, or
 * `(err, msg?)`; `bindings` are the logger's (a child's).
 */
export function logCall(level: TailLevel, args: unknown[], bindings: Record<string, unknown>): LogCall | undefined {
  const [first, ...rest] = args;
  let msg = '';
  let fields: Record<string, unknown> = { ...bindings };
  if (typeof first === 'string') msg = format(first, ...rest);
  else if (first instanceof Error) {
    fields.err = { type: first.name, message: first.message, stack: first.stack };
    msg = typeof rest[0] === 'string' ? format(...(rest as [string])) : first.message;
  } else if (typeof first === 'object' && first !== null) {
    fields = { ...fields, ...errorsAsJson(first as Record<string, unknown>) };
    if (typeof rest[0] === 'string') msg = format(...(rest as [string]));
  } else if (first !== undefined) msg = String(first);
  return capLogCall({ level, msg, time: Date.now(), ...(Object.keys(fields).length ? { fields } : {}) });
}

/** An `err` field as pino's serializer writes it: an Error's own fields are not enumerable. */
function errorsAsJson(o: Record<string, unknown>): Record<string, unknown> {
  const e = o.err;
  return e instanceof Error ? { ...o, err: { type: e.name, message: e.message, stack: e.stack } } : o;
}

/**
 * `log`, also sending each line to `send`: its level methods and children (with their
 * bindings) are wrapped; anything else is the logger's own.
 */
export function tailedLogger(log: Logger, send: (call: LogCall) => void, bindings: Record<string, unknown> = {}): Logger {
  return new Proxy(log, {
    get(target, prop, receiver) {
      if (TAIL_LEVELS.includes(prop as TailLevel)) {
        const level = prop as TailLevel;
        return (...args: unknown[]) => {
          (target[level] as (...a: unknown[]) => void).apply(target, args);
          const call = logCall(level, args, bindings);
          if (call) send(call);
        };
      }
      if (prop === 'child') {
        return (more: Record<string, unknown>, options?: object) => tailedLogger(target.child(more, options), send, { ...bindings, ...more });
      }
      return Reflect.get(target, prop, receiver) as unknown;
    },
  });
}
