// How a handler's run ends when it does not answer: the errors that stop it, and the answer
// each failure gets (a HandlerError's own status, a timeout's 504, anything else 500).
import { errorBody } from '../../core/contracts.ts';
import type { Logger } from '../../core/log.ts';
import { InferenceRequestError } from '../../core/oip/request.ts';
import { HandlerError } from '../../sdk/index.ts';
import { AnswerTooLargeError } from './result-body.ts';

export class TimeoutError extends Error {
  override name = 'TimeoutError';
}

export class CanceledError extends Error {
  override name = 'CanceledError';
}

export function errorReply(err: unknown, fn: { name: string; version: string }, log: Logger): { status: number; body: string } {
  if (err instanceof InferenceRequestError) return { status: 400, body: JSON.stringify(errorBody('invalid_input', err.message)) };
  if (err instanceof HandlerError || (err as Error)?.name === 'HandlerError') {
    const e = err as HandlerError;
    return { status: e.status, body: JSON.stringify(errorBody(e.code, e.message)) };
  }
  if (err instanceof TimeoutError) return { status: 504, body: JSON.stringify(errorBody('timeout', err.message)) };
  if (err instanceof AnswerTooLargeError) {
    log.error({ bytes: err.bytes, max: err.max }, 'answer too large: answered 500 instead');
    return { status: 500, body: JSON.stringify(errorBody('answer_too_large', `${fn.name} ${err.message}`)) };
  }
  log.error({ err }, 'handler failed');
  const message = err instanceof Error ? err.message : String(err);
  return { status: 500, body: JSON.stringify(errorBody('handler_error', `${fn.name} ${fn.version} failed: ${message}`)) };
}
