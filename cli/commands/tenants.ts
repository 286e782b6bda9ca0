// `embers tenants create|list|delete|budget`: the admin's view of tenants (admin key).
import { Command } from 'commander';
import type { Budget } from '../../core/budgets.ts';
import type { Tenant } from '../../core/tenants.ts';
import { CliError } from '../errors.ts';
import { adminClientFrom, notACommand, printJson, table, withAdminConnection } from './common.ts';

type Opts = { url?: string; adminKey?: string; json?: boolean };

export function tenantsCommand(): Command {
  const cmd = new Command('tenants').description('create, list and delete tenants (needs the admin key)');

  withAdminConnection(cmd.command('create').description('create a tenant and print its id').argument('<name>', 'a human name, e.g. "acme"').option('--json', 'print JSON')).action(
    async (name: string, opts: Opts) => {
      const t = await adminClientFrom(opts).call<Tenant>('POST', '/v1/tenants', { name });
      if (opts.json) return printJson(t);
      process.stdout.write(`created tenant ${t.name} (${t.id}); give it a key: embers keys create ${t.id}\n`);
    },
  );

  withAdminConnection(cmd.command('list', { isDefault: true }).description('list tenants').argument('[unknown...]').option('--json', 'print JSON')).action(async (unknown: string[], opts: Opts) => {
    notACommand(cmd, unknown);
    const { tenants } = await adminClientFrom(opts).call<{ tenants: Tenant[] }>('GET', '/v1/tenants');
    if (opts.json) return printJson(tenants);
    table(['ID', 'NAME', 'CREATED'], tenants.map((t) => [t.id, t.name, t.createdAt]));
  });

  withAdminConnection(cmd.command('delete').description('delete a tenant and revoke all its keys (its functions stay)').argument('<id>', 'tenant id').option('--json', 'print JSON')).action(
    async (id: string, opts: Opts) => {
      const r = await adminClientFrom(opts).call<{ deleted: string; revokedKeys: number }>('DELETE', `/v1/tenants/${encodeURIComponent(id)}`);
      if (opts.json) return printJson(r);
      process.stdout.write(`deleted tenant ${id}; revoked ${r.revokedKeys} key${r.revokedKeys === 1 ? '' : 's'}\n`);
    },
  );
  withAdminConnection(
    cmd
      .command('budget')
      .description("show or set a tenant's monthly budgets: once reached, its runs answer 429 budget_exhausted until the UTC month ends")
      .argument('<id>', 'tenant id')
      .option('--spend <n>', 'monthly spend, in the unit of the prices', positive('--spend'))
      .option('--compute-seconds <n>', 'monthly compute-seconds', positive('--compute-seconds'))
      .option('--webhook <url>', 'called at 80 % and 100 % of a budget, signed like job webhooks')
      .option('--delete', 'remove its budgets')
      .option('--json', 'print JSON'),
  ).action(async (id: string, opts: Opts & { spend?: number; computeSeconds?: number; webhook?: string; delete?: boolean }) => {
    const client = adminClientFrom(opts);
    const route = `/v1/tenants/${encodeURIComponent(id)}/budget`;
    if (opts.delete) {
      const r = await client.call<{ deleted: string }>('DELETE', route);
      return opts.json ? printJson(r) : void process.stdout.write(`removed the budgets of tenant ${id}\n`);
    }
    const setting = opts.spend !== undefined || opts.computeSeconds !== undefined;
    if (!setting && opts.webhook !== undefined) throw new CliError('--webhook goes with --spend or --compute-seconds (a PUT replaces the whole budget)', 2);
    const body = { ...(opts.spend !== undefined ? { monthlySpend: opts.spend } : {}), ...(opts.computeSeconds !== undefined ? { monthlyComputeSeconds: opts.computeSeconds } : {}), ...(opts.webhook ? { webhook: opts.webhook } : {}) };
    const b = await client.call<BudgetView>(setting ? 'PUT' : 'GET', route, setting ? body : undefined);
    if (opts.json) return printJson(b);
    const rows: string[][] = [];
    if (b.monthlySpend !== undefined) rows.push(['spend', String(b.monthlySpend), String(b.monthToDate.cost), `${Math.floor((100 * b.monthToDate.cost) / b.monthlySpend)} %`]);
    if (b.monthlyComputeSeconds !== undefined) rows.push(['compute-seconds', String(b.monthlyComputeSeconds), String(b.monthToDate.computeSeconds), `${Math.floor((100 * b.monthToDate.computeSeconds) / b.monthlyComputeSeconds)} %`]);
    process.stdout.write(`tenant ${b.tenant}, ${b.monthToDate.month}${b.webhook ? `; alerts to ${b.webhook}` : ''}\n`);
    table(['BUDGET', 'MONTHLY', 'USED', 'SHARE'], rows);
  });
  return cmd;
}

type BudgetView = Budget & { tenant: string; monthToDate: { month: string; cost: number; computeSeconds: number } };

function positive(flag: string) {
  return (v: string) => {
    const n = Number(v);
    if (!(n > 0)) throw new CliError(`${flag} takes a number above 0, not "${v}"`, 2);
    return n;
  };
}
