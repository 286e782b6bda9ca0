// A request's server-side timing, split as Triton splits it (compute input, infer, compute
// output) around its model calls.
import type { ReplyHeader } from '../../core/contracts.ts';

/** A request's model calls: when the first began and the last ended (performance.now()), and their sums. */
export interface CallTimes {
  firstAt?: number;
  lastEndAt?: number;
  /** Calls not answered yet. */
  pending: number;
  /** This request's share of inference, summed over its calls (ms): what it is metered for. */
  inferMs: number;
  /** How long the inferences its calls rode in ran, summed (ms): a batch's whole run; calls in parallel count each. */
  execMs: number;
  /** Its calls' waits for their batch to start, summed (ms). */
  batchMs: number;
  /** Calls waiting for their batch to start now. */
  waiting: number;
  /** Since when at least one call has been waiting (performance.now(); while `waiting` > 0). */
  waitingSince: number;
  /** How long at least one of its calls was waiting for its batch, in intervals that ended (ms). */
  heldMs: number;
}

export const newCallTimes = (): CallTimes => ({ pending: 0, inferMs: 0, execMs: 0, batchMs: 0, waiting: 0, waitingSince: 0, heldMs: 0 });

/** How long, up to `now`, at least one of the request's model calls was waiting for its batch to start (ms). */
export const heldMs = (times: CallTimes, now: number): number => times.heldMs + (times.waiting > 0 ? now - times.waitingSince : 0);

/** Marks one model call waiting for its batch; the function returned ends the wait (once). */
export function holdCall(times: CallTimes): () => void {
  if (times.waiting++ === 0) times.waitingSince = performance.now();
  let ended = false;
  return () => {
    if (ended) return;
    ended = true;
    if (--times.waiting === 0) times.heldMs += performance.now() - times.waitingSince;
  };
}

const ms2 = (n: number) => Math.round(n * 100) / 100;

/**
 * A request's timing from its call times, in Triton's terms: compute input (from taking the request,
 * input validation included, to its first model call; all of a handler that calls none) and
 * compute output (from its last model call's answer to the serialised result; none while a call
 * is still unanswered, as after a timeout), around the calls' batch waits and inference (exec:
 * the runs they rode in; infer: the request's share).
 */
export function splitTiming(queueMs: number, t0: number, end: number, times: CallTimes): ReplyHeader['timing'] {
  const first = times.firstAt ?? end;
  const last = times.pending > 0 ? end : (times.lastEndAt ?? end);
  return {
    queueMs,
    handlerMs: ms2(end - t0),
    inferMs: ms2(times.inferMs),
    execMs: ms2(times.execMs),
    batchMs: ms2(times.batchMs),
    inputMs: ms2(Math.max(0, first - t0)),
    outputMs: ms2(Math.max(0, end - Math.max(last, first))),
  };
}

/** The timing of a request answered without running its handler (replica shutting down, job canceled). */
export const unrunTiming = (queueMs: number): ReplyHeader['timing'] => splitTiming(queueMs, 0, 0, newCallTimes());
