// User-code process entry: the tenant's code runs here and nowhere else. Its replica
// (handler-process.ts) starts it, inside the sandbox where the host allows one, with an
// environment that holds no platform setting beyond logging; it boots, loads the native modules
// handlers use, says so, and waits for its assignment. Its only channel is the IPC one.
import { errorBody } from '../core/contracts.ts';
import { createLogger } from '../core/log.ts';
import { unrunTiming } from './timing.ts';
import { Outbox } from './outbox.ts';
import type { FromUserCode, ToUserCode } from './user-code-messages.ts';
import { StartFailure } from './user-code-messages.ts';
import { UserCode } from './user-code.ts';

const log = createLogger('user-code');
const outbox = new Outbox<FromUserCode>((messages) => {
  if (process.connected) process.send!(messages);
});
const send = (m: FromUserCode) => outbox.push(m);

/** Loaded before the assignment, so a cold start finds them loaded; one not installed is skipped. */
const PRELOAD = ['sharp', 'onnxruntime-node'];

const user = new UserCode({
  log,
  announce: (busy) => send({ type: 'announce', busy }),
  onStuck: (rid) => send({ type: 'stuck', rid }),
  sendChunk: (n, data) => send({ type: 'chunk', n, data }),
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
      void user.run(m).then(send, (err: unknown) => {
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
