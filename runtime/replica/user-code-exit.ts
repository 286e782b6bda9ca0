// How a user-code process ended, and what that means for a person and for the runs it answers.
import { errorBody } from '../../core/contracts.ts';
import { unrunTiming } from '../channel/timing.ts';
import type { CheckedResult } from './user-code-channel.ts';

export interface UserCodeExit {
  code: number | null;
  signal: NodeJS.Signals | null;
  /** Killed by the kernel for going over its memory limit. */
  oom: boolean;
  /** Ended by the replica for breaking its channel's bounds: what it broke. */
  violation?: string;
  /** Ended by the replica (stopped, or replaced as stuck): what it held was not answered. */
  stopped?: boolean;
  /** Runs it held that were not answered: the replica hands them over. */
  lost: number;
}

export function describeExit(e: Pick<UserCodeExit, 'code' | 'signal'>): string {
  return e.signal ? `signal ${e.signal}` : `code ${e.code}`;
}

/** What an exit means, for a person: broke its channel, out of memory (with the limit), or its code or signal. */
export function exitMessage(e: UserCodeExit, memoryBytes: number): string {
  if (e.violation) return `the function's process broke its channel to the replica (it ${e.violation}) and was ended`;
  return e.oom ? `the user-code process went over its memory limit (${Math.round(memoryBytes / 2 ** 20)} MiB) and was killed` : `the user-code process exited (${describeExit(e)})`;
}

/** The answer of a run the exit is the answer to; `alone`: it ran only this request, which is not run again. */
export function exitResult(e: UserCodeExit, memoryBytes: number, alone: boolean): CheckedResult {
  const [status, code] = e.violation ? [500, 'user_code_violation'] : e.oom ? [503, 'replica_oom'] : [500, 'replica_crashed'];
  const message = `${exitMessage(e, memoryBytes)}${alone ? ' while running this request alone, so it is not run again' : ''}`;
  return { status, body: JSON.stringify(errorBody(code, message)), timing: unrunTiming(0) };
}
