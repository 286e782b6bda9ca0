// `embers` — one file per command under cli/commands; errors decide the exit code.
import { EMBERS_VERSION } from '../core/version.ts';
import { Command, CommanderError } from 'commander';
import { ConfigError } from '../core/config.ts';
import { CliError } from './errors.ts';
import { devCommand } from './commands/dev.ts';
import { deployCommand } from './commands/deploy.ts';
import { initCommand } from './commands/init.ts';
import { rollbackCommand, versionsCommand } from './commands/versions.ts';
import { functionsCommand } from './commands/functions.ts';
import { runCommand } from './commands/run.ts';
import { modelsCommand } from './commands/models.ts';
import { batchCommand } from './commands/batch.ts';
import { bucketsCommand } from './commands/buckets.ts';
import { secretsCommand } from './commands/secrets.ts';
import { filesCommand } from './commands/files.ts';
import { jobsCommand } from './commands/jobs.ts';
import { usageCommand } from './commands/usage.ts';
import { agentCommand, gatewayCommand } from './commands/components.ts';
import { tenantsCommand } from './commands/tenants.ts';
import { keysCommand } from './commands/keys.ts';
import { tailCommand } from './commands/tail.ts';

/**
 * The platform's start-up failures a person can act on (platform/local-redis.ts, gateway/server.ts,
 * scheduler/metrics-server.ts), told by name: their modules load only with the commands that start it.
 */
const PLATFORM_START_ERRORS = ['MissingDependencyError', 'DataDirInUseError', 'GatewayStartError', 'MetricsServerError'];

const program = new Command('embers')
  .description('Serverless inference endpoints on your own machines: TypeScript handlers, ONNX models, one command to deploy.')
  .version(EMBERS_VERSION, '-V, --version', 'print the version')
  .showHelpAfterError('(run with --help for usage)')
  // `-V, --version` is read before a command's name only: `embers tail fn --version v3` is tail's.
  .enablePositionalOptions()
  .exitOverride();

program.addCommand(devCommand('dev'), { isDefault: false });
program.addCommand(devCommand('start'));
program.addCommand(initCommand());
program.addCommand(deployCommand());
program.addCommand(functionsCommand());
program.addCommand(secretsCommand());
program.addCommand(versionsCommand());
program.addCommand(rollbackCommand());
program.addCommand(runCommand());
program.addCommand(tailCommand());
program.addCommand(modelsCommand());
program.addCommand(batchCommand());
program.addCommand(filesCommand());
program.addCommand(bucketsCommand());
program.addCommand(jobsCommand());
program.addCommand(usageCommand());
program.addCommand(gatewayCommand());
program.addCommand(agentCommand());
program.addCommand(tenantsCommand());
program.addCommand(keysCommand());

// Commands added with addCommand inherit neither setting: without them a subcommand's parser
// error exits 1 on its own, with no hint.
const configure = (c: Command): void => {
  c.exitOverride().showHelpAfterError('(run with --help for usage)');
  c.commands.forEach(configure);
};
configure(program);

try {
  await program.parseAsync(process.argv);
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
