import type { Command } from 'commander';
import type { Logger } from '../../core/log.ts';
import { adminClientOptions, clientOptions, EmbersClient } from '../client.ts';
import { CliError } from '../errors.ts';

/** --url and --key on every command that talks to a gateway. */
export function withConnection(cmd: Command): Command {
  return cmd
    .option('--url <url>', 'gateway URL (env EMBERS_URL)', undefined)
    .option('--key <key>', 'API key (env EMBERS_API_KEY; default: the one `npm start` keeps in .embers/api-key)');
}

/** --tenant on the commands that name functions: which tenant's, for the admin key. */
export function withTenant(cmd: Command): Command {
  return cmd.option('--tenant <id>', "with the admin key: the tenant whose functions these are (default: the default tenant's)");
}

export function clientFrom(opts: { url?: string; key?: string; tenant?: string }): EmbersClient {
  return new EmbersClient(clientOptions(opts));
}

export function printJson(value: unknown): void {
  process.stdout.write(`${JSON.stringify(value, null, 2)}\n`);
}

/** --url and --admin-key on the commands that manage tenants and keys. */
export function withAdminConnection(cmd: Command): Command {
  return cmd
    .option('--url <url>', 'gateway URL (env EMBERS_URL)', undefined)
    .option('--admin-key <key>', 'admin key (env EMBERS_ADMIN_KEY; default: the one `npm start` keeps in .embers/admin-key)');
}

export function adminClientFrom(opts: { url?: string; adminKey?: string }): EmbersClient {
  return new EmbersClient(adminClientOptions(opts));
}

/** A plain aligned table on stdout. */
export function table(head: string[], rows: string[][]): void {
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)));
  for (const r of [head, ...rows]) process.stdout.write(`${r.map((c, i) => c.padEnd(widths[i])).join('  ')}\n`);
}

/**
 * Stops on SIGINT, SIGTERM or SIGHUP with `stop`, then exits 0. SIGHUP: the terminal closed.
 * Writes to it fail from now on (the logger mutes itself, core/log.ts; stdout and stderr are
 * muted here), and the kernel may send SIGHUP twice: only a second Ctrl-C or SIGTERM means "now".
 */
export function onStop(log: Logger, stop: () => Promise<void>): void {
  let stopping = false;
  const handler = (signal: string) => {
    if (signal === 'SIGHUP') for (const s of [process.stdout, process.stderr]) s.on('error', () => {});
    if (stopping && signal === 'SIGHUP') return;
    if (stopping) {
      log.warn('second signal: exiting now');
      process.exit(130);
    }
    stopping = true;
    log.info({ signal }, 'stopping');
    void stop().finally(() => process.exit(0));
  };
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) process.on(signal, () => handler(signal));
}

/**
 * A group's default `list` takes any words that name no subcommand (`embers functions delte x`):
 * say the command is unknown and which there are, not that `list` got too many arguments.
 */
export function notACommand(group: Command, words: string[]): void {
  if (!words.length) return;
  const known = group.commands.map((c) => c.name()).join(', ');
  throw new CliError(`unknown command '${words[0]}' for '${group.name()}' (its commands: ${known}; see embers ${group.name()} --help)`, 2);
}
