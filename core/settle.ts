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

/** How long a BullMQ close is waited for before its connections are cut (closeOrDisconnect). */
const BULLMQ_CLOSE_WAIT_MS = 5_000;

/**
 * Closes a BullMQ worker or queue, waiting at most 5 s; past that, force-disconnects it (bounded
 * too). After a Redis outage and restart, the webhook worker's `close()` was seen never to end
 * (twice in the full test suite, after the faults file's outage test), and a timer of the worker's
 * then kept the process alive after everything else had stopped.
 */
export async function closeOrDisconnect(c: { close(): Promise<void>; disconnect(): Promise<void> }, log: Logger, what: string, during: string): Promise<void> {
  if (await waitAtMost(c.close(), BULLMQ_CLOSE_WAIT_MS, log, `${what} to close (${during})`)) return;
  await waitAtMost(c.disconnect(), BULLMQ_CLOSE_WAIT_MS, log, `${what} to disconnect (${during})`);
}
