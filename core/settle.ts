// Bounded waits for shutdown steps that depend on Redis (a BullMQ close, a pass of the
// scheduler): a step that never settles must not hold a stop for ever.
import type { Logger } from './log.ts';

/**
 * Waits for `p` (settled either way) up to `ms`; past that, logs that it gave up waiting for
 * `what` (naming the step: a stop that hangs says where) and returns false.
 */
export async function waitAtMost(p: Promise<unknown> | null | undefined, ms: number, log: Logger, what: string): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const settled = await Promise.race([
    Promise.resolve(p).then(
      () => true,
      () => true,
    ),
    new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(false), ms))),
  ]);
  clearTimeout(timer);
  if (!settled) log.warn({ waitedMs: ms }, `gave up waiting for ${what}`);
  return settled;
}
