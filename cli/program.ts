// The `embers` command tree, built without running anything: cli/main.ts parses argv with it,
// and the CLI reference (docs/generate/cli.ts) reads its commands, arguments and options.
import { EMBERS_VERSION } from '../core/version.ts';
import { Command } from 'commander';
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

export function buildProgram(): Command {
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
  return program;
}
