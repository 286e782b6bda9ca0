// `embers` — one file per command under cli/commands, put together in cli/program.ts; errors
// decide the exit code.
import { CommanderError } from 'commander';
import { ConfigError } from '../core/config.ts';
import { CliError } from './errors.ts';
import { buildProgram } from './program.ts';

/**
 * The platform's start-up failures a person can act on (platform/local-redis.ts, gateway/server.ts,
 * scheduler/metrics-server.ts), told by name: their modules load only with the commands that start it.
 */
const PLATFORM_START_ERRORS = ['MissingDependencyError', 'DataDirInUseError', 'GatewayStartError', 'MetricsServerError'];

// A reader that closes early (`embers functions show ocr | head`) ends the output, not with a stack trace.
process.stdout.on('error', (err: NodeJS.ErrnoException) => {
  if (err.code === 'EPIPE') process.exit(0);
  throw err;
});

try {
  await buildProgram().parseAsync(process.argv);
} catch (err) {
  // Help and --version exit 0; the parser's complaints (unknown command or option, a missing
  // value) are usage errors, 2 like the CLI's own (cli/errors.ts).
  if (err instanceof CommanderError) process.exit(err.exitCode === 0 ? 0 : 2);
  if (err instanceof CliError || err instanceof ConfigError || PLATFORM_START_ERRORS.includes((err as Error)?.name)) {
    process.stderr.write(`embers: ${(err as Error).message}\n`);
    process.exit(err instanceof CliError ? err.exitCode : 2);
  }
  throw err;
}
