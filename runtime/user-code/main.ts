// User-code process entry: the tenant's code runs here and nowhere else. Its replica
// (runtime/replica/user-code-process.ts) starts it, inside the sandbox where the host allows one,
// with an environment that holds no platform setting beyond logging; it boots, loads the native
// modules handlers use, says so, and waits for its assignment. Its only channel is the two pipes
// of frames to and from its replica (runtime/channel/frames.ts).
import { errorBody } from '../../core/contracts.ts';
import { createLogger } from '../../core/log.ts';
import { unrunTiming } from '../channel/timing.ts';
import { Outbox } from '../channel/outbox.ts';
import type { FromUserCode, ToUserCode } from '../channel/messages.ts';
import { StartFailure } from '../channel/messages.ts';
import { UserCode, type RunOutcome } from './user-code.ts';
import net from 'node:net';
import { LogBudget } from './tail-log.ts';
import type { LogCall, StartPhase } from '../../core/log-lines.ts';
import { startWatchdog } from './watchdog.ts';
import { BYTES, FROM_REPLICA_FD, FrameReader, MESSAGES, TO_REPLICA_FD, writeFrame, writeMessages } from '../channel/frames.ts';

const log = createLogger('user-code');
const toReplica = new net.Socket({ fd: TO_REPLICA_FD, readable: false, writable: true });
toReplica.on('error', () => process.exit(0));
const outbox = new Outbox<FromUserCode>((messages) => writeMessages(toReplica, messages));
const send = (m: FromUserCode) => outbox.push(m);
/** Run bodies that came ahead of their run message, by run number. */
const bodies = new Map<number, Buffer>();
const fromReplica = new net.Socket({ fd: FROM_REPLICA_FD, readable: true, writable: false });
// From the replica, which is trusted: the bounds only catch a broken pipe.
new FrameReader(fromReplica, {
  maxBytes: { [MESSAGES]: 2 ** 32 - 1, [BYTES]: 2 ** 32 - 1 },
  onFrame: (kind, n, bytes) => {
    if (kind === BYTES) bodies.set(n, bytes);
    else for (const m of JSON.parse(bytes.toString('utf8')) as ToUserCode[]) receive(m);
  },
  onCorrupt: (why) => {
    log.error({ why }, 'the channel from the replica broke');
    process.exit(70);
  },
});
/** JSON bodies up to this long go inside the result message; longer ones in the run's bytes frame. */
const INLINE_BODY_CHARS = 16 * 1024;

/** A result goes out with its long body and binary answer, if any, in a bytes frame just before it. */
function sendResult(r: RunOutcome): void {
  tellDrops(r.n);
  const { bytes, body, ...rest } = r;
  const long = body !== undefined && body.length > INLINE_BODY_CHARS ? Buffer.from(body) : undefined;
  if (!bytes && !long) return send(r as FromUserCode);
  const data = bytes?.data ?? Buffer.alloc(0);
  writeFrame(toReplica, BYTES, r.n, long ? Buffer.concat([long, data]) : data);
  send({ ...rest, ...(long ? { bodyBytes: long.length } : { body }), ...(bytes ? { bytes: { contentType: bytes.contentType, length: data.length, headerLength: bytes.headerLength } } : {}) } as FromUserCode);
}

function run(m: Extract<ToUserCode, { type: 'run' }>): Promise<RunOutcome> {
  if (m.rawBytes !== undefined) {
    const body = bodies.get(m.n) ?? Buffer.alloc(0);
    bodies.delete(m.n);
    if (m.raw !== undefined && typeof m.input === 'object' && m.input !== null) (m.input as Record<string, unknown>)[m.raw] = body;
  }
  return user.run(m);
}

/** Loaded before the assignment, so a cold start finds them loaded; one not installed is skipped. */
const PRELOAD = ['sharp', 'onnxruntime-node'];

const logBudget = new LogBudget();
/** Lines dropped over the budget, not told yet; told with the next line, or on their own within DROPS_TOLD_MS. */
let logsDropped = 0;
let dropsTimer: NodeJS.Timeout | undefined;
const DROPS_TOLD_MS = 250;

function sendLog(n: number, call: LogCall, phase?: StartPhase): void {
  if (logBudget.take()) {
    send({ type: 'log', n, call, ...(phase ? { phase } : {}), ...(logsDropped ? { dropped: logsDropped } : {}) });
    logsDropped = 0;
    return;
  }
  logsDropped++;
  dropsTimer ??= setTimeout(() => tellDrops(n), DROPS_TOLD_MS);
}

/** Says how many lines were dropped, if any: before a result too, so its summary line comes after them. */
function tellDrops(n: number): void {
  clearTimeout(dropsTimer);
  dropsTimer = undefined;
  if (logsDropped) send({ type: 'log', n, dropped: logsDropped });
  logsDropped = 0;
}

const watchdog = startWatchdog();
const user = new UserCode({
  log,
  markRun: watchdog.mark,
  onStuck: (n) => send({ type: 'stuck', n }),
  sendChunk: (n, data) => send({ type: 'chunk', n, data }),
  sendLog,
  sendCall: (n, call) => send({ type: 'call', n, ...call }),
  abortCall: (c) => send({ type: 'call_abort', c }),
  creditCall: (c, k) => send({ type: 'call_credit', c, k }),
});

function receive(m: ToUserCode): void {
  switch (m?.type) {
    case 'assign':
      void user.start(m).then(
        (phases) => send({ type: 'started', phases }),
        (err: unknown) => send({ type: 'start_failed', phase: err instanceof StartFailure ? err.phase : 'bundle', message: String((err as Error)?.message ?? err).slice(0, 2000) }),
      );
      break;
    case 'run':
      void run(m).then(sendResult, (err: unknown) => {
        log.error({ err }, 'could not run a request');
        send({ type: 'result', n: m.n, status: 500, body: JSON.stringify(errorBody('handler_error', 'the request could not be run')), timing: unrunTiming(m.queueMs) });
      });
      break;
    case 'abort':
      user.abort(m.n, m.canceled);
      break;
    case 'credit':
      user.credit(m.n, m.k);
      break;
    case 'peers':
      user.peers(m.busy);
      break;
    case 'stats':
      send({ type: 'stats', stats: user.stats() });
      break;
    case 'call_result':
      user.calls.result(m.c, m.status, m.body);
      break;
    case 'call_chunk':
      user.calls.chunk(m.c, m.data);
      break;
  }
}
// Its replica is gone (or closed the channel to stop it): nothing may outlive it.
fromReplica.on('end', () => {
  void user.close().finally(() => process.exit(0));
  setTimeout(() => process.exit(0), 2_000).unref();
});
process.on('SIGTERM', () => process.exit(0));
process.on('SIGINT', () => {});

await Promise.all(PRELOAD.map((m) => import(m).catch(() => {})));
send({ type: 'standby' });
