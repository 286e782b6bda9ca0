import { stat } from 'node:fs/promises';
import path from 'node:path';
import { Command } from 'commander';
import { loadConfig } from '../../core/config.ts';
import { createLogger } from '../../core/log.ts';
import { caCert, EmbersClient } from '../client.ts';
import { deployFile } from '../deploy.ts';
import { discoverFunctions } from '../discover.ts';
import { onStop } from './common.ts';
import { CliError } from '../errors.ts';
import { FunctionWatcher } from '../watch.ts';

/** Longest a Ctrl-C waits for replicas to drain and everything to stop. */
const STOP_DEADLINE_MS = 45_000;
const DEFAULT_FUNCTIONS_DIR = 'functions';

export function devCommand(name: 'dev' | 'start'): Command {
  return new Command(name)
    .description('run Embers locally: Redis, S3, gateway and replicas in one process, then deploy ./functions')
    .option('--functions <dir>', 'deploy every function in this folder at start', DEFAULT_FUNCTIONS_DIR)
    .option('--no-deploy', 'start without deploying anything')
    .option('--watch', 'redeploy a function when its file, or a file of yours it imports, changes (a new version each time)')
    .addHelpText('after', '\nConfiguration comes from EMBERS_* variables (README: Configuration); unset Redis/S3 are started embedded.')
    .action(async (opts: { functions: string; deploy: boolean; watch?: boolean }) => {
      // The default folder may be missing (nothing to deploy yet); a folder named on the command
      // line may not: checked before anything starts.
      if (opts.deploy && opts.functions !== DEFAULT_FUNCTIONS_DIR && !(await stat(opts.functions).catch(() => null))?.isDirectory()) {
        throw new CliError(`--functions ${opts.functions}: no such folder (${path.resolve(opts.functions)})`, 2);
      }
      const config = loadConfig();
      const log = createLogger('embers', config.EMBERS_LOG_LEVEL);
      // Loaded here: the platform's modules are most of the CLI, and other commands never need them.
      const { startPlatform } = await import('../../platform/embedded.ts');
      const platform = await startPlatform(config, log);
      // Replicas drain what they hold first; a stop that cannot finish (Redis killed from
      // outside, a replica that will not exit) must not leave the terminal waiting for ever.
      // Redis, in a process group of its own, is stopped last.
      let watcher: FunctionWatcher | undefined;
      onStop(log, async () => {
        setTimeout(() => {
          log.error(`could not stop cleanly within ${STOP_DEADLINE_MS / 1000} s (is Redis still reachable?); exiting anyway`);
          process.exit(1);
        }, STOP_DEADLINE_MS).unref();
        watcher?.close();
        await platform.stop();
      });

      // Over HTTPS, deploying to itself trusts its own certificate unless EMBERS_CA_CERT says otherwise.
      const ca = caCert(process.env.EMBERS_CA_CERT ?? config.EMBERS_TLS_CERT);
      const client = new EmbersClient({ url: platform.url, apiKey: platform.apiKey, ca });
      const deployed: string[] = [];
      watcher = opts.watch && opts.deploy ? new FunctionWatcher({ deploy: (file) => deployFile(client, file), log: (msg, err) => (err ? log.warn({ err: err.message }, msg) : log.info(msg)) }) : undefined;
      if (opts.deploy) {
        const dir = path.resolve(opts.functions);
        for (const file of await discoverFunctions(dir).catch(() => [])) {
          try {
            const r = await deployFile(client, file, (line) => log.info(line));
            watcher?.add(file, r);
            deployed.push(r.name);
            log.info({ fn: r.name, version: r.version }, 'deployed');
          } catch (err) {
            log.error(`could not deploy ${path.relative(process.cwd(), file)}: ${(err as Error).message}`);
          }
        }
      }
      const example = deployed.includes('echo') ? 'echo' : (deployed[0] ?? 'echo');
      const banner = [
        '',
        `  Embers is running at ${platform.url}`,
        `  API key:   ${platform.apiKey}`,
        `  Admin key: ${platform.adminKey}  (tenants and keys: \`npx embers tenants --help\`)`,
        `  Functions: ${deployed.length ? deployed.join(', ') : 'none (deploy with `npx embers deploy path/to/fn.ts`)'}`,
        '',
        '  Try it:',
        `    curl -s ${config.EMBERS_TLS_CERT ? `--cacert ${config.EMBERS_TLS_CERT} ` : ''}-H "Authorization: Bearer ${platform.apiKey}" -H 'content-type: application/json' \\`,
        `      -d '{"hello":"embers"}' ${platform.url}/v1/run/${example}`,
        '',
        `  Console: ${platform.url}/console  (sign in with a key above)`,
        `  API reference: ${platform.url}/docs   Open Inference Protocol: ${platform.url}/v2`,
        '',
        ...(watcher ? ['  Watching the functions\' files: a change redeploys the function.', ''] : []),
        '  Ctrl-C stops everything this started.',
        '',
      ].join('\n');
      process.stdout.write(`${banner}\n`);
    });
}
