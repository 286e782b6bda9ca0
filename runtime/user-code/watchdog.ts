// Which run holds the process's thread. A handler in a synchronous loop lets nothing else run
// here, the replica's messages and every other request's continuation included; the replica sees
// only silence. So the main thread marks, in memory shared with a watchdog thread, the run that
// last got control through the platform (its handler called, a model call answered, its stream
// pulled), and beats while it is free. When the beats stop for BLOCKED_MS the watchdog writes that
// run's number on a pipe of its own to the replica (again every second while held), which answers that run at its timeout and
// hands the others over (runtime/replica/user-code-process.ts). A run that spins after awaiting
// something else (a timer of its own) may be misnamed: only its function's own requests are then
// affected, and the replica's hand-over still runs each alone (decisions/007).
import { Worker } from 'node:worker_threads';

/** The watchdog's pipe in the user-code process. */
export const WATCHDOG_FD = 5;
const BEAT_MS = 100;
const BLOCKED_MS = 500;
/** Told again this often while the thread stays held: a message read after it clears the replica's note. */
const RETELL_MS = 1000;

const WATCH = `
const { workerData } = require('node:worker_threads');
const { writeSync } = require('node:fs');
const shared = workerData.shared;
let beat = Atomics.load(shared, 0);
let since = Date.now();
let toldAt = 0;
setInterval(() => {
  const now = Atomics.load(shared, 0);
  if (now !== beat) {
    beat = now;
    since = Date.now();
    toldAt = 0;
    return;
  }
  const run = Atomics.load(shared, 1);
  if (run <= 0 || Date.now() - since < ${BLOCKED_MS} || Date.now() - toldAt < ${RETELL_MS}) return;
  const b = Buffer.alloc(4);
  b.writeUInt32LE(run);
  try { writeSync(workerData.fd, b); } catch {}
  toldAt = Date.now();
}, ${BEAT_MS});
`;

/** Starts the watchdog thread; `mark(n)` says run n got control. */
export function startWatchdog(fd = WATCHDOG_FD): { mark: (n: number) => void } {
  const shared = new Int32Array(new SharedArrayBuffer(8));
  setInterval(() => Atomics.add(shared, 0, 1), BEAT_MS).unref();
  const worker = new Worker(WATCH, { eval: true, workerData: { shared, fd } });
  worker.unref();
  worker.on('error', () => {});
  return { mark: (n) => Atomics.store(shared, 1, n) };
}
