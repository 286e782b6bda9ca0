// `embers usage` — what was run and what it costs, per function and day (or hour).
import { Command, Option } from 'commander';
import type { UsageRow } from '../../core/usage.ts';
import { clientFrom, printJson, table, withConnection } from './common.ts';
import { usageExportCommand } from './usage-export.ts';

export function usageCommand(): Command {
  return withConnection(
    new Command('usage')
      .description('requests, compute seconds, cold starts and cost per function and day (the tenant of your key; every tenant when --key is the admin key)')
      .option('--from <when>', 'start, ISO date or time (default: 7 days ago)')
      .option('--to <when>', 'end, exclusive (default: an hour from now, so the current hour counts)')
      .option('--function <name>', 'one function only')
      .option('--tenant <id>', 'one tenant (with --key set to the admin key)')
      .addOption(new Option('--granularity <g>', 'rows per hour or per day').choices(['hour', 'day']).default('day'))
      .option('--json', 'print JSON'),
  ).action(async (opts: { url?: string; key?: string; from?: string; to?: string; function?: string; tenant?: string; granularity: string; json?: boolean }) => {
    const q = new URLSearchParams({ granularity: opts.granularity });
    // --tenant goes as ?tenant= with every request (clientFrom).
    for (const k of ['from', 'to', 'function'] as const) if (opts[k]) q.set(k, opts[k]!);
    const res = await clientFrom(opts).call<{ data: UsageRow[] }>('GET', `/v1/usage?${q}`);
    if (opts.json) return printJson(res);
    if (res.data.length === 0) return void process.stdout.write('no usage in that period\n');
    const rows = res.data.map((r) => [r.period.slice(0, opts.granularity === 'day' ? 10 : 13), r.tenant, r.function, String(r.requests), String(r.errors), String(r.coldStarts), r.computeSeconds.toFixed(3), r.cost.toFixed(6)]);
    table(['PERIOD', 'TENANT', 'FUNCTION', 'REQUESTS', 'ERRORS', 'COLD', 'COMPUTE_S', 'COST'], rows);
  })
    // `usage export --from …`: the options after `export` are its own, not those of `usage`.
    .enablePositionalOptions()
    .addCommand(usageExportCommand());
}
