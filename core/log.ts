import { writeSync } from 'node:fs';
import { pino, type DestinationStream, type Logger } from 'pino';

export type { Logger };

const LOG_CHUNK_BYTES = 8192;
const LOG_FLUSH_MS = 100;

/**
 * Standard output written off the event loop in chunks of 8 KiB, or 100 ms after a line that did
 * not fill one: a write per line costs a system call per request on a busy gateway. The flush is
 * armed by a write, not by a clock, so an idle process is never woken by it.
 * Flushed on exit.
 */
function chunked(): ReturnType<typeof pino.destination> {
  const d = pino.destination({ dest: 1, sync: false, minLength: LOG_CHUNK_BYTES });
  const write = d.write.bind(d);
  let armed: NodeJS.Timeout | undefined;
  d.write = (chunk: string) => {
    const ok = write(chunk);
    if (!armed) {
      armed = setTimeout(() => {
        armed = undefined;
        d.flush();
      }, LOG_FLUSH_MS);
      armed.unref();
    }
    return ok;
  };
  return d;
}

/**
 * sonic-boom's flushSync (run at exit) retries every failed write but EAGAIN for ever: with the
 * terminal hung up (EIO) and lines still buffered, the process would never exit. A write of
 * nothing finds that out first, and the error goes where every other write error goes.
 */
function guardFlush(d: ReturnType<typeof pino.destination>): void {
  const flushSync = d.flushSync.bind(d);
  d.flushSync = () => {
    try {
      writeSync((d as unknown as { fd: number }).fd, '');
    } catch (err) {
      d.emit('error', err);
      return;
    }
    flushSync();
  };
}

/** One logger per process; children carry component, request ids and replica ids. */
export function createLogger(name: string, level = process.env.EMBERS_LOG_LEVEL ?? 'info'): Logger {
  const prettyEnv = process.env.EMBERS_LOG_PRETTY;
  const pretty = prettyEnv ? prettyEnv === '1' || prettyEnv === 'true' : process.stdout.isTTY;
  const destination: DestinationStream & { on(event: 'error', fn: (err: Error) => void): unknown } = pretty
    ? pino.transport({ target: 'pino-pretty', options: { colorize: true, ignore: 'pid,hostname', translateTime: 'HH:MM:ss.l' } })
    : chunked();
  const logger = pino(
    {
      name,
      level,
      redact: { paths: ['req.headers.authorization', '*.authorization', '*.apiKey', '*.secretAccessKey'], censor: '[redacted]' },
    },
    destination,
  );
  if (!pretty) guardFlush(destination as ReturnType<typeof pino.destination>);
  // A closed terminal (EIO: the terminal hung up, and `embers dev` is stopping on its SIGHUP), a
  // closed pipe (EPIPE), or the pretty printer's thread gone with them: the log has nowhere to go,
  // and must not take the process down with it (unhandled, the error would end a drain midway).
  // What was buffered before the error cannot be written either: a flush at exit would retry it
  // for ever (sonic-boom's flushSync loops on EIO), so writing and flushing become no-ops, as
  // pino does for EPIPE alone.
  destination.on('error', (err: Error & { code?: string }) => {
    if (logger.level === 'silent') return;
    logger.level = 'silent';
    const d = destination as unknown as Record<string, unknown>;
    for (const m of ['write', 'flushSync', 'end']) if (typeof d[m] === 'function') d[m] = () => {};
    if (typeof d.flush === 'function') d.flush = (cb?: (err?: Error) => void) => cb?.();
    // Say so once where it may still be read (a log file that filled its disk, say); a closed
    // terminal refuses this too, and nothing more is tried.
    try {
      writeSync(2, `${name}: logging stopped: ${err.code ?? err.message}\n`);
    } catch {
      // Nowhere to say it.
    }
  });
  return logger;
}
