// `embers versions list|deploy` and `embers rollback`: a function's versions and which of them
// take its requests (gateway/routes/versions.ts).
import { Command, InvalidArgumentError } from 'commander';
import { CliError } from '../errors.ts';
import { clientFrom, printJson, table, withConnection, withTenant } from './common.ts';

interface VersionsView {
  name: string;
  active: string;
  previous: string | null;
  versions: { version: string; createdAt: string; active: boolean; traffic: number }[];
  split: { version: string; percent: number; auto: { step: number; steps: number[]; stepStartedAt: string } | null } | null;
  rollout: { version: string; from: string; outcome: 'promoted' | 'rolled_back'; reason: string; at: string } | null;
}

type Opts = { url?: string; key?: string; tenant?: string; json?: boolean };

const path = (name: string, what: string) => `/v1/functions/${encodeURIComponent(name)}/${what}`;

/** `v3=10%` (or `v3=10`) → ['v3', 10]; a bare `v3` → ['v3', 100]. */
export function parseShare(arg: string): [string, number] {
  const m = /^(v\d+)(?:=(\d+)%?)?$/.exec(arg.trim());
  if (!m) throw new InvalidArgumentError(`"${arg}" is not a version and its share: write it as v3=10%`);
  return [m[1], m[2] === undefined ? 100 : Number(m[2])];
}

export function versionsCommand(): Command {
  const cmd = new Command('versions').description('list a function\'s versions, split its traffic between two, or roll one out step by step');

  withTenant(withConnection(cmd.command('list').description('versions, when each was made, which is active and the share of requests each takes').argument('<function>').option('--json', 'print JSON'))).action(async (name: string, opts: Opts) => {
    const v = await clientFrom(opts).call<VersionsView>('GET', path(name, 'versions'));
    if (opts.json) return printJson(v);
    printVersions(v);
  });

  withTenant(withConnection(
    cmd
      .command('deploy')
      .description('split the requests of a function between two versions (each on replicas of its own), or, with --auto, roll a version out 10 → 50 → 100 % while it does as well as the active one')
      .argument('<function>')
      .argument('<shares...>', 'versions and their shares, adding up to 100: v3=10% v2=90% (one version alone takes everything); with --auto, the version to roll out')
      .option('--auto', 'promote step by step while its error rate and p99 stay within bounds of the active version\'s; roll back at once when they do not')
      .option('--json', 'print JSON')
      .addHelpText('after', '\nExamples:\n  embers versions deploy ocr v3=10% v2=90%\n  embers versions deploy ocr v3 --auto\n  curl -H "Embers-Version-Key: user-42" …   (the same key keeps the same version)'),
  )).action(async (name: string, args: string[], opts: Opts & { auto?: boolean }) => {
    const shares = args.map(parseShare);
    const client = clientFrom(opts);
    let v: VersionsView;
    if (opts.auto) {
      if (shares.length !== 1) throw new CliError('--auto rolls out one version: `embers versions deploy <function> v3 --auto`', 2);
      v = await client.call<VersionsView>('POST', path(name, 'rollouts'), { version: shares[0][0] });
    } else {
      v = await client.call<VersionsView>('PUT', path(name, 'traffic'), { traffic: Object.fromEntries(shares) });
    }
    if (opts.json) return printJson(v);
    printVersions(v);
  });
  return cmd;
}

export function rollbackCommand(): Command {
  return withTenant(withConnection(
    new Command('rollback')
      .description('make an earlier version active on every gateway at once: the one named, or else end a split (an automatic rollout too) or go back to the previous active version')
      .argument('<function>')
      .argument('[version]', 'the version to go to, e.g. v2')
      .option('--json', 'print JSON'),
  )).action(async (name: string, version: string | undefined, opts: Opts) => {
    const v = await clientFrom(opts).call<VersionsView>('POST', path(name, 'rollback'), version === undefined ? {} : { version });
    if (opts.json) return printJson(v);
    process.stdout.write(`${name}: ${v.active} takes every request\n`);
  });
}

function printVersions(v: VersionsView): void {
  table(['VERSION', 'CREATED', 'ACTIVE', 'TRAFFIC'], v.versions.map((r) => [r.version, r.createdAt, r.active ? 'yes' : '', `${r.traffic}%`]));
  if (v.split?.auto && v.split.percent === 0) process.stdout.write(`rolling out ${v.split.version}: starting its first replica before it takes requests\n`);
  else if (v.split?.auto) process.stdout.write(`rolling out ${v.split.version}: step ${v.split.auto.step + 1} of ${v.split.auto.steps.length} (${v.split.auto.steps.join(' → ')} %) since ${v.split.auto.stepStartedAt}\n`);
  if (v.rollout) process.stdout.write(`last rollout: ${v.rollout.version} ${v.rollout.outcome === 'promoted' ? 'promoted' : 'ROLLED BACK'} at ${v.rollout.at}: ${v.rollout.reason}\n`);
}
