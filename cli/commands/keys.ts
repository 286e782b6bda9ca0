// `embers keys create|list|revoke`: a tenant's API keys (admin key). Secrets are shown once.
import { Command, InvalidArgumentError } from 'commander';
import { SCOPES, type ApiKey, type Scope } from '../../core/tenants.ts';
import { adminClientFrom, printJson, table, withAdminConnection } from './common.ts';

type Opts = { url?: string; adminKey?: string; json?: boolean };

function parseScopes(value: string): Scope[] {
  const scopes = value.split(',').map((s) => s.trim()).filter(Boolean);
  const bad = scopes.filter((s) => !(SCOPES as readonly string[]).includes(s));
  if (bad.length || scopes.length === 0) throw new InvalidArgumentError(`scopes are a comma-separated list of ${SCOPES.join(', ')}`);
  return scopes as Scope[];
}

function parsePositive(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1) throw new InvalidArgumentError('must be a whole number ≥ 1');
  return n;
}

export function keysCommand(): Command {
  const cmd = new Command('keys').description("create, list and revoke a tenant's API keys (needs the admin key)");

  withAdminConnection(
    cmd
      .command('create')
      .description('create an API key for a tenant and print its secret (shown this once)')
      .argument('<tenant>', 'tenant id')
      .option('--name <name>', 'what the key is for, e.g. "ci"')
      .option('--scopes <list>', `comma-separated: ${SCOPES.join(', ')} (default: all)`, parseScopes)
      .option('--rps <n>', 'quota: requests per second to /v1/run (default: unlimited)', parsePositive)
      .option('--concurrency <n>', 'quota: requests in flight at once (default: unlimited)', parsePositive)
      .option('--json', 'print JSON (the secret is its "key")'),
  ).action(async (tenant: string, opts: Opts & { name?: string; scopes?: Scope[]; rps?: number; concurrency?: number }) => {
    const limits = { ...(opts.rps ? { rps: opts.rps } : {}), ...(opts.concurrency ? { concurrency: opts.concurrency } : {}) };
    const body = { ...(opts.name ? { name: opts.name } : {}), ...(opts.scopes ? { scopes: opts.scopes } : {}), ...(Object.keys(limits).length ? { limits } : {}) };
    const k = await adminClientFrom(opts).call<ApiKey & { key: string }>('POST', `/v1/tenants/${encodeURIComponent(tenant)}/keys`, body);
    if (opts.json) return printJson(k);
    // The secret alone on stdout (KEY=$(embers keys create …) works); the rest on stderr.
    process.stderr.write(`created key ${k.id} for tenant ${k.tenant} (scopes: ${k.scopes.join(', ')})\n`);
    process.stderr.write('save this secret now: it will not be shown again (Embers keeps only its hash)\n');
    process.stdout.write(`${k.key}\n`);
  });

  withAdminConnection(cmd.command('list').description("list a tenant's keys (never their secrets)").argument('<tenant>', 'tenant id').option('--json', 'print JSON')).action(
    async (tenant: string, opts: Opts) => {
      const { keys } = await adminClientFrom(opts).call<{ keys: ApiKey[] }>('GET', `/v1/tenants/${encodeURIComponent(tenant)}/keys`);
      if (opts.json) return printJson(keys);
      table(['ID', 'NAME', 'SCOPES', 'CREATED', 'REVOKED'], keys.map((k) => [k.id, k.name ?? '', k.scopes.join(','), k.createdAt, k.revokedAt ?? '']));
    },
  );

  withAdminConnection(cmd.command('revoke').description('revoke a key: it stops working at once, on every gateway').argument('<tenant>', 'tenant id').argument('<key-id>', 'key id (from `keys list`)').option('--json', 'print JSON')).action(
    async (tenant: string, keyId: string, opts: Opts) => {
      const r = await adminClientFrom(opts).call<{ revoked: string; revokedAt: string }>('DELETE', `/v1/tenants/${encodeURIComponent(tenant)}/keys/${encodeURIComponent(keyId)}`);
      if (opts.json) return printJson(r);
      process.stdout.write(`revoked ${keyId} (at ${r.revokedAt})\n`);
    },
  );
  return cmd;
}
