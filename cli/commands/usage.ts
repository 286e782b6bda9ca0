// `embers usage` — what was run and what it costs, per function and day (or hour); `embers usage
// invoice` — a tenant's month per function and version.
import { Command, Option } from 'commander';
import type { Invoice, InvoiceTotals } from '../../core/invoice.ts';
import type { UsageRow } from '../../core/usage.ts';
import { clientFrom, printJson, table, withConnection } from './common.ts';
import { usageExportCommand } from './usage-export.ts';

export function usageCommand(): Command {
  return withConnection(
    new Command('usage')
      .description('requests, compute seconds, cold starts and cost (as charged) per function and day (the tenant of your key; every tenant when --key is the admin key); `embers usage invoice`: a month')
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
    .addCommand(usageExportCommand())
    .addCommand(invoiceCommand());
}

/** `embers usage invoice`: a tenant's month per function and version, with a total line. */
function invoiceCommand(): Command {
  return withConnection(
    new Command('invoice')
      .description("a month's requests, errors, compute and cold-start seconds, bytes and cost per function and version, each request at the prices in force when it ran (your key's tenant; --tenant with the admin key)")
      .option('--month <YYYY-MM>', 'a UTC month (default: the current one)')
      .option('--tenant <id>', 'the tenant (required with the admin key)')
      .option('--json', 'print JSON'),
  ).action(async (opts: { url?: string; key?: string; month?: string; tenant?: string; json?: boolean }) => {
    const q = new URLSearchParams(opts.month ? { month: opts.month } : {});
    const inv = await clientFrom(opts).call<Invoice>('GET', `/v1/usage/invoice${q.size ? `?${q}` : ''}`);
    if (opts.json) return printJson(inv);
    process.stdout.write(invoiceText(inv));
  });
}

const INVOICE_HEAD = ['FUNCTION', 'VERSION', 'REQUESTS', 'ERRORS', 'COMPUTE_S', 'COLD_S', 'BYTES_IN', 'BYTES_OUT', 'COST'];

/** The invoice as a table: text columns left, numbers right, a rule, then the total. */
export function invoiceText(inv: Invoice): string {
  const title = `invoice for tenant ${inv.tenant}, ${inv.month} (UTC)\n`;
  if (inv.lines.length === 0) return `${title}no usage in ${inv.month}\n`;
  const cells = (name: string, version: string, t: InvoiceTotals) => [name, version, String(t.requests), String(t.errors), t.computeSeconds.toFixed(3), t.coldStartSeconds.toFixed(3), String(t.bytesIn), String(t.bytesOut), t.cost.toFixed(6)];
  const rows = inv.lines.map((l) => cells(l.function, l.version, l));
  const total = cells('TOTAL', '', inv.total);
  const widths = INVOICE_HEAD.map((h, i) => Math.max(h.length, total[i].length, ...rows.map((r) => r[i].length)));
  const line = (r: string[]) => `${r.map((c, i) => (i < 2 ? c.padEnd(widths[i]) : c.padStart(widths[i]))).join('  ').trimEnd()}\n`;
  const rule = `${widths.map((w) => '─'.repeat(w)).join('──')}\n`;
  return title + line(INVOICE_HEAD) + rows.map(line).join('') + rule + line(total);
}
