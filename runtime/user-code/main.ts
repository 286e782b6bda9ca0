// User-code process entry: the tenant's code runs here and nowhere else. Its replica
// (handler-process.ts) starts it, inside the sandbox where the host allows one, with an
// environment that holds no platform setting beyond logging; it boots, loads the native modules
// handlers use, says so, and waits for its assignment. Its only channels are the IPC one and the
// byte channel's two pipes beside it.
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
import { BYTES_IN_FD, BYTES_OUT_FD, FrameReader, writeFrame } from '../channel/byte-channel.ts';

const log = createLogger('user-code');
const outbox = new Outbox<FromUserCode>((messages) => {
  if (process.connected) process.send!(messages);
});
const send = (m: FromUserCode) => outbox.push(m);
const bytesOut = new net.Socket({ fd: BYTES_OUT_FD, readable: false, writable: true });
// From the replica, which is trusted: the bounds only catch a broken pipe.
const frames = new FrameReader(new net.Socket({ fd: BYTES_IN_FD, readable: true, writable: false }), {
  maxBytes: 2 ** 32 - 1,
  maxHeld: 65_536,
  onCorrupt: (why) => {
    log.error({ why }, 'the byte channel from the replica broke');
    process.exit(70);
  },
});

/** A result goes out with its answer's bytes, if any, on the byte channel first. */
function sendResult(r: RunOutcome): void {
  tellDrops(r.n);
  if (!r.bytes) return send(r as FromUserCode);
  const { data, ...rest } = r.bytes;
  writeFrame(bytesOut, r.n, data);
  send({ ...r, bytes: { ...rest, length: data.length } });
}

async function run(m: Extract<ToUserCode, { type: 'run' }>): Promise<RunOutcome> {
  if (m.rawBytes !== undefined) {
    const body = await frames.take(m.n);
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

const user = new UserCode({
  log,
  announce: (busy) => send({ type: 'announce', busy }),
  onStuck: (rid) => send({ type: 'stuck', rid }),
  sendChunk: (n, data) => send({ type: 'chunk', n, data }),
  sendLog,
});

process.on('message', (messages: ToUserCode[]) => {
  if (Array.isArray(messages)) for (const m of messages) receive(m);
});

function receive(m: ToUserCode): void {
  switch (m?.type) {
    case 'assign':
      void user.start(m).then(
        (phases) => send({ type: 'started', phases }),
        (err: unknown) => send({ type: 'start_failed', phase: err instanceof StartFailure ? err.phase : 'bundle', message: (err as Error)?.message ?? String(err) }),
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
    case 'peer':
      user.peer(m.id, m.busy);
      break;
    case 'stats':
      send({ type: 'stats', stats: user.stats() });
      break;
  }
}
// Its replica is gone (or closed the channel to stop it): nothing may outlive it.
process.on('disconnect', () => {
  void user.close().finally(() => process.exit(0));
  setTimeout(() => process.exit(0), 2_000).unref();
});
process.on('SIGTERM', () => process.exit(0));
process.on('SIGINT', () => {});

await Promise.all(PRELOAD.map((m) => import(m).catch(() => {})));
send({ type: 'standby' });
