import { Command } from 'commander';
import { deployFile } from '../deploy.ts';
import { clientFrom, printJson, withConnection, withTenant } from './common.ts';

export function deployCommand(): Command {
  return withTenant(withConnection(
    new Command('deploy')
      .description('bundle function files, upload their local models, and activate a new version of each')
      .argument('<files...>', 'function files (each default-exports defineFunction({...}))')
      .option('--json', 'print the result as JSON'),
  )).action(async (files: string[], opts: { url?: string; key?: string; tenant?: string; json?: boolean }) => {
    const client = clientFrom(opts);
    const results = [];
    for (const file of files) {
      const r = await deployFile(client, file, (line) => process.stderr.write(`${line}\n`));
      results.push(r);
      if (!opts.json) process.stdout.write(`${r.unchanged ? 'unchanged' : 'deployed'} ${r.name} ${r.version} → POST ${r.endpoint}\n`);
    }
    if (opts.json) printJson(results);
  });
}
