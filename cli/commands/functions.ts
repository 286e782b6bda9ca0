import { Command } from 'commander';
import type { TensorSpec } from '../../core/oip/datatypes.ts';
import { clientFrom, notACommand, printJson, table, withConnection, withTenant } from './common.ts';
import type { Manifest } from '../../core/contracts.ts';

interface CallEdge { name: string; lastAt: string }
interface Summary { name: string; active: string; versions: number; updatedAt: string; tenant: string }
interface ReplicaView {
  id: string;
  state: string;
  version: string;
  coldStart?: Record<string, number>;
  error?: { phase: string; message: string };
  jobs: { active: number; completed: number; failed: number };
  gc?: { count: number; ms: number };
  memory?: { usedBytes?: number; limitBytes: number };
  models: Record<string, { provider: string; executions: number; inferences: number; maxCallsPerBatch: number; cap?: number; instances?: number; wide?: number; lone?: { choice: 'wide' | 'narrow'; wide: number | null; narrow: number | null } }>;
}

export function functionsCommand(): Command {
  const cmd = new Command('functions').description('list, show and delete deployed functions');

  withTenant(withConnection(cmd.command('list', { isDefault: true }).description('list functions and their active versions').argument('[unknown...]').option('--json', 'print JSON'))).action(
    async (unknown: string[], opts: { url?: string; key?: string; tenant?: string; json?: boolean }) => {
      notACommand(cmd, unknown);
      const { functions } = await clientFrom(opts).call<{ functions: Summary[] }>('GET', '/v1/functions');
      if (opts.json) return printJson(functions);
      if (functions.length === 0) return void process.stdout.write('no functions deployed yet: `embers deploy path/to/fn.ts`\n');
      const rows = functions.map((f) => [f.name, f.active, String(f.versions), f.updatedAt, f.tenant]);
      table(['NAME', 'ACTIVE', 'VERSIONS', 'UPDATED', 'TENANT'], rows);
    },
  );

  withTenant(withConnection(cmd.command('show').description('show a function: versions, replicas, cold starts, batching counters').argument('<name>').option('--json', 'print JSON'))).action(
    async (name: string, opts: { url?: string; key?: string; tenant?: string; json?: boolean }) => {
      const fn = await clientFrom(opts).call<{
        name: string;
        active: string;
        endpoint: string;
        versions: { version: string; createdAt: string; rolledFor?: 'secrets' }[];
        replicas: ReplicaView[];
        manifest: { models: Record<string, string>; vars?: Record<string, string>; scaling: Manifest['scaling']; binaryInput?: string; kind?: 'model'; tensors?: Manifest['tensors'] };
        scale: { desired: number; inFlight: number; ready: number; reason: string } | null;
        coldStarts: ({ replica: string; at: string } & Record<string, number | string>)[];
        split: { version: string; percent: number; auto: { step: number; steps: number[] } | null } | null;
        rollout: { version: string; outcome: string; reason: string; at: string } | null;
        calls: { out: CallEdge[]; in: CallEdge[] };
      }>(
        'GET',
        `/v1/functions/${encodeURIComponent(name)}`,
      );
      if (opts.json) return printJson(fn);
      const out = process.stdout;
      out.write(`${fn.name}  active ${fn.active}  ${fn.endpoint}\n`);
      for (const [h, uri] of Object.entries(fn.manifest.models)) out.write(`  model ${h}: ${uri}\n`);
      if (fn.manifest.binaryInput) out.write(`  takes bytes: a body with a non-JSON Content-Type is its "${fn.manifest.binaryInput}"\n`);
      const t = fn.manifest.tensors;
      if (t) {
        const list = (ts: TensorSpec[]) => ts.map((x) => `${x.name} ${x.datatype} [${x.shape.join(',')}]`).join(', ') || '(undeclared)';
        out.write(`  ${fn.manifest.kind === 'model' ? 'bare model, ' : ''}takes tensors: ${list(t.inputs)} → ${list(t.outputs)} (Open Inference Protocol: ${fn.endpoint.replace(/\/v1\/run\/[^/]+$/, `/v2/models/${fn.name}/infer`)})\n`);
      }
      for (const [k, v] of Object.entries(fn.manifest.vars ?? {})) out.write(`  var ${k}=${JSON.stringify(v)}\n`);
      out.write(`versions: ${fn.versions.map((v) => (v.rolledFor ? `${v.version} (${v.rolledFor} changed)` : v.version)).join(', ')}\n`);
      if (fn.split) out.write(`  traffic: ${fn.active} ${100 - fn.split.percent}%, ${fn.split.version} ${fn.split.percent}%${fn.split.auto ? ` (rolling out: ${fn.split.auto.steps.join(' → ')} %)` : ''}\n`);
      if (fn.rollout) out.write(`  last rollout: ${fn.rollout.version} ${fn.rollout.outcome === 'promoted' ? 'promoted' : 'ROLLED BACK'} at ${fn.rollout.at}: ${fn.rollout.reason}\n`);
      const sc = fn.manifest.scaling;
      out.write(`scaling: min ${sc.minReplicas}, max ${sc.maxReplicas}, target ${sc.targetConcurrency} in flight per replica, keep-alive ${sc.idleTimeoutS === 'auto' ? 'auto (up to 300 s)' : `up to ${sc.idleTimeoutS} s`}\n`);
      if (fn.scale) out.write(`  now: ${fn.scale.desired} desired, ${fn.scale.ready} ready, ${fn.scale.inFlight} in flight (${fn.scale.reason})\n`);
      if (fn.replicas.length === 0) out.write('replicas: none running\n');
      for (const r of fn.replicas) {
        out.write(`replica ${r.id} [${r.state}] ${r.version}  jobs ok ${r.jobs.completed} failed ${r.jobs.failed} active ${r.jobs.active}\n`);
        if (r.error) out.write(`  failed in ${r.error.phase}: ${r.error.message}\n`);
        if (r.coldStart) out.write(`  cold start (ms): ${phaseLine(r.coldStart)}\n`);
        if (r.memory) out.write(`  user code memory: ${r.memory.usedBytes === undefined ? '?' : mib(r.memory.usedBytes)} of ${mib(r.memory.limitBytes)} MiB\n`);
        if (r.gc) out.write(`  garbage collection: ${r.gc.count} pauses, ${r.gc.ms} ms in all\n`);
        for (const [m, s] of Object.entries(r.models)) {
          const avg = s.executions ? (s.inferences / s.executions).toFixed(2) : '-';
          out.write(`  model ${m} on ${s.provider}: ${s.executions} batches, ${s.inferences} rows, avg batch ${avg}, most calls in one batch ${s.maxCallsPerBatch}${s.cap === undefined ? '' : `, batches capped at ${s.cap} rows (the cheapest per row so far)`}${s.instances === undefined ? '' : `, ${s.instances} instance(s)`}${s.wide ? `, ${s.wide} batches alone on every core` : ''}${s.lone ? `; a lone request runs ${s.lone.choice === 'wide' ? 'on every core' : 'on a narrow session'} (median ms per million input values: every core ${ms(s.lone.wide)}, narrow ${ms(s.lone.narrow)})` : ''}\n`);
        }
      }
      if (fn.calls.out.length) out.write(`calls (last hour): ${edgeList(fn.calls.out)}\n`);
      if (fn.calls.in.length) out.write(`called by (last hour): ${edgeList(fn.calls.in)}\n`);
      if (fn.coldStarts.length) out.write('last cold starts (ms):\n');
      for (const c of fn.coldStarts.slice(0, 5)) {
        const failed = c.error as unknown as { phase: string; message: string } | undefined;
        out.write(`  ${c.at} ${c.replica}: ${failed ? `failed in ${failed.phase}: ${failed.message}` : phaseLine(c)}\n`);
      }
    },
  );

  withTenant(withConnection(
    cmd
      .command('delete')
      .description('delete a function (its versions stay in S3); refused while requests are queued for it')
      .argument('<name>')
      .option('--force', 'delete even with requests queued: those not started yet are answered 410 (async jobs end failed)'),
  )).action(async (name: string, opts: { url?: string; key?: string; tenant?: string; force?: boolean }) => {
    const res = (await clientFrom(opts).call('DELETE', `/v1/functions/${encodeURIComponent(name)}${opts.force ? '?force=true' : ''}`)) as { dropped?: number };
    process.stdout.write(`deleted ${name}${res.dropped ? ` (${res.dropped} queued request(s) answered 410)` : ''}\n`);
  });
  return cmd;
}

function phaseLine(p: Record<string, unknown>): string {
  const names: [string, string][] = [['spawnMs', 'spawn'], ['bundleMs', 'bundle'], ['modelFetchMs', 'model_fetch'], ['modelLoadMs', 'model_load'], ['setupMs', 'setup'], ['warmupMs', 'warmup'], ['totalMs', 'total']];
  return names.map(([k, label]) => `${label} ${Math.round(Number(p[k] ?? 0))}`).join(', ');
}

/** Functions at the other end of calls, newest first: `upper (12 s ago), words (3 min ago)`. */
function edgeList(edges: CallEdge[], now = Date.now()): string {
  return edges.map((e) => `${e.name} (${ago(now - Date.parse(e.lastAt))})`).join(', ');
}

function ago(ms: number): string {
  const s = Math.max(0, ms / 1000);
  return s < 60 ? `${Math.round(s)} s ago` : s < 3600 ? `${Math.round(s / 60)} min ago` : `${(s / 3600).toFixed(1)} h ago`;
}

/** A median that may not be measured yet (null in JSON). */
const ms = (v: number | null) => (v === null || Number.isNaN(v) ? '-' : v.toFixed(1));
const mib = (bytes: number) => Math.round(bytes / 2 ** 20);
