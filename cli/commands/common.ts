import type { Command } from 'commander';
import { clientOptions, EmbersClient } from '../client.ts';

/** --url and --key on every command that talks to a gateway. */
export function withConnection(cmd: Command): Command {
  return cmd
    .option('--url <url>', 'gateway URL (env EMBERS_URL)', undefined)
    .option('--key <key>', 'API key (env EMBERS_API_KEY; default: the one `npm start` keeps in .embers/api-key)');
}

export function clientFrom(opts: { url?: string; key?: string }): EmbersClient {
  return new EmbersClient(clientOptions(opts));
}

export function printJson(value: unknown): void {
  process.stdout.write(`${JSON.stringify(value, null, 2)}\n`);
}
