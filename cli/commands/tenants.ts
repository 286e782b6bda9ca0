// `embers tenants create|list|delete`: the admin's view of tenants (admin key).
import { Command } from 'commander';
import type { Tenant } from '../../core/tenants.ts';
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
  return cmd;
}
