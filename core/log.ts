import { pino, type Logger } from 'pino';

export type { Logger };

/** One logger per process; children carry component, request ids and replica ids. */
export function createLogger(name: string, level = process.env.EMBERS_LOG_LEVEL ?? 'info'): Logger {
  const prettyEnv = process.env.EMBERS_LOG_PRETTY;
  const pretty = prettyEnv ? prettyEnv === '1' || prettyEnv === 'true' : process.stdout.isTTY;
  return pino({
    name,
    level,
    redact: { paths: ['req.headers.authorization', '*.authorization', '*.apiKey', '*.secretAccessKey'], censor: '[redacted]' },
    ...(pretty ? { transport: { target: 'pino-pretty', options: { colorize: true, ignore: 'pid,hostname', translateTime: 'HH:MM:ss.l' } } } : {}),
  });
}
