// The shipped Prometheus config, alert rules and Grafana dashboard, run for real: promtool checks
// them and runs the rules' unit tests, then Prometheus (Debian's package) scrapes a running
// platform's gateway and node agent with a config made from infra/prometheus/prometheus.yml, and
// after some traffic every expression of the dashboard and every measured side of an alert has
// data. Skipped where Prometheus is not installed.
import assert from 'node:assert/strict';
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { after, before, describe, it } from 'node:test';
import YAML from 'yaml';
import { freePort } from '../../platform/ports.ts';
import { eventually, fixture, ROOT, startTestPlatform, type TestPlatform } from '../helpers/platform.ts';

const PROMETHEUS = '/usr/bin/prometheus';
const PROMTOOL = '/usr/bin/promtool';
const missing = [PROMETHEUS, PROMTOOL].filter((f) => !existsSync(f));
const SKIP = missing.length ? `${missing.join(' and ')} not found: apt-get install prometheus (Debian's package has both) to run this test` : undefined;

const INFRA = path.join(ROOT, 'infra');
/** What the test puts for the dashboard's variables: every function, and a rate window a 1 s scrape fills. */
const DASHBOARD_VARIABLES: Record<string, string> = { __rate_interval: '15s', function: '.*' };

const run = promisify(execFile);

let p: TestPlatform;
let tmp: string;
let prometheus: ChildProcess | undefined;
let promUrl: string;
let promLog = '';

before(async () => {
  if (SKIP) return;
  tmp = await mkdtemp(path.join(os.tmpdir(), 'embers-prometheus-'));
  p = await startTestPlatform({ EMBERS_METRICS_PORT: String(await freePort()) });
  await p.deploy(fixture('tiny.ts'));
  await p.deploy(fixture('boom.ts'));
});

after(async () => {
  prometheus?.kill('SIGKILL');
  await p?.close();
  if (tmp) await rm(tmp, { recursive: true, force: true });
});

/** infra/prometheus/prometheus.yml with this platform's addresses, a 1 s scrape, and the admin key in a file of the test's. */
async function testConfig(): Promise<string> {
  const config = YAML.parse(await readFile(path.join(INFRA, 'prometheus/prometheus.yml'), 'utf8'));
  const keyFile = path.join(tmp, 'admin-key');
  await writeFile(keyFile, p.adminKey, { mode: 0o600 });
  const targets: Record<string, string> = { 'embers-gateway': new URL(p.url).host, 'embers-agent': new URL(p.agent.metricsUrl!).host };
  assert.deepEqual(config.scrape_configs.map((j: { job_name: string }) => j.job_name).sort(), Object.keys(targets).sort(), 'the shipped config scrapes gateways and agents');
  Object.assign(config.global, { scrape_interval: '1s', scrape_timeout: '1s', evaluation_interval: '1s' });
  config.rule_files = config.rule_files.map((f: string) => path.join(INFRA, 'prometheus', f));
  for (const job of config.scrape_configs) {
    if (job.job_name === 'embers-gateway') {
      assert.ok(job.authorization?.credentials_file, 'gateways are scraped with the admin key from a file');
      job.authorization.credentials_file = keyFile;
    }
    job.static_configs = [{ targets: [targets[job.job_name]] }];
  }
  const file = path.join(tmp, 'prometheus.yml');
  await writeFile(file, YAML.stringify(config));
  return file;
}

async function promtool(...args: string[]): Promise<string> {
  const { stdout, stderr } = await run(PROMTOOL, args, { cwd: path.join(INFRA, 'prometheus') }).catch((err: { stdout?: string; stderr?: string; message: string }) => {
    throw new Error(`promtool ${args.join(' ')} failed:\n${err.stdout ?? ''}${err.stderr ?? err.message}`);
  });
  return stdout + stderr;
}

async function api<T>(route: string): Promise<T> {
  const res = await fetch(`${promUrl}${route}`);
  const body = (await res.json()) as { status: string; data: T; error?: string };
  assert.equal(body.status, 'success', `${route}: ${body.error}`);
  return body.data;
}

const query = (expr: string) => api<{ result: unknown[] }>(`/api/v1/query?query=${encodeURIComponent(expr)}`);

describe('Prometheus and Grafana', () => {
  it('the dashboard reads Prometheus through its data source variable, and narrows every panel by function', async () => {
    const d = JSON.parse(await readFile(path.join(INFRA, 'grafana/embers.json'), 'utf8')) as Dashboard;
    assert.ok(d.schemaVersion >= 39);
    assert.deepEqual(d.templating.list.map((v) => [v.name, v.type]), [['DS_PROMETHEUS', 'datasource'], ['function', 'query']]);
    const panels = d.panels.flatMap((x) => [x, ...(x.panels ?? [])]).filter((x) => x.type !== 'row');
    for (const panel of panels) {
      assert.equal(panel.datasource?.uid, '${DS_PROMETHEUS}', `panel "${panel.title}"`);
      for (const target of panel.targets ?? []) assert.equal(target.datasource?.uid, '${DS_PROMETHEUS}', `panel "${panel.title}"`);
    }
    const perFunction = panels.flatMap((x) => x.targets ?? []).filter((x) => /function/.test(x.expr ?? ''));
    for (const target of perFunction) assert.match(target.expr!, /function=~"\$function"/, 'a per-function expression follows the variable');
  });

  it('promtool passes the config, the alert rules and their unit tests', async (t) => {
    if (SKIP) return t.skip(SKIP);
    await promtool('check', 'config', '--syntax-only', 'prometheus.yml');
    await promtool('check', 'config', await testConfig());
    assert.match(await promtool('check', 'rules', '--lint-fatal', 'alerts.yml'), /SUCCESS: \d+ rules found/);
    assert.match(await promtool('test', 'rules', 'alerts.test.yml'), /SUCCESS/);
  });

  it('Prometheus scrapes every gateway and node agent with the shipped config', async (t) => {
    if (SKIP) return t.skip(SKIP);
    const port = await freePort();
    promUrl = `http://127.0.0.1:${port}`;
    prometheus = spawn(PROMETHEUS, [`--config.file=${await testConfig()}`, `--storage.tsdb.path=${path.join(tmp, 'data')}`, `--web.listen-address=127.0.0.1:${port}`, '--log.level=warn'], { stdio: ['ignore', 'ignore', 'pipe'] });
    prometheus.stderr!.on('data', (d: Buffer) => (promLog = (promLog + d.toString()).slice(-4000)));
    await eventually(async () => (await fetch(`${promUrl}/-/ready`).catch(() => null))?.ok, `Prometheus to be ready (its log: ${promLog})`);
    type Target = { labels: { job: string }; health: string; lastError: string };
    const targets = await eventually(async () => {
      const { activeTargets } = await api<{ activeTargets: Target[] }>('/api/v1/targets');
      return activeTargets.length === 2 && activeTargets.every((x) => x.health === 'up') && activeTargets;
    }, 'both targets to be up');
    assert.deepEqual(targets.map((x) => x.labels.job).sort(), ['embers-agent', 'embers-gateway']);
    // Every rule evaluates without error (a rule that fails to evaluate has health "err").
    type Rule = { name: string; health: string; lastError?: string };
    await eventually(async () => {
      const { groups } = await api<{ groups: { rules: Rule[] }[] }>('/api/v1/rules');
      const rules = groups.flatMap((g) => g.rules);
      const bad = rules.filter((r) => r.health === 'err');
      assert.deepEqual(bad, [], 'no rule fails');
      return rules.length > 0 && rules.every((r) => r.health === 'ok');
    }, 'every rule to be evaluated');
  });

  it('after some traffic, every dashboard expression and every alert\'s measured side has data', async (t) => {
    if (SKIP) return t.skip(SKIP);
    const runFn = async (name: string, body: unknown) => {
      const res = await p.fetch(`/v1/run/${name}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
      await res.arrayBuffer();
      return res.status;
    };
    // A cold start each, batched inferences, an error, and a request that crashes the two replicas it runs on.
    assert.equal(await runFn('tiny', { n: 1 }), 200);
    assert.deepEqual(await Promise.all([4, 4, 2].map((n) => runFn('tiny', { n }))), [200, 200, 200]);
    assert.equal(await runFn('boom', { mode: 'ok' }), 200);
    assert.equal(await runFn('boom', { mode: 'throw' }), 500);
    assert.equal(await runFn('boom', { mode: 'exit' }), 500);

    const dashboard = JSON.parse(await readFile(path.join(INFRA, 'grafana/embers.json'), 'utf8')) as Dashboard;
    const alerts = YAML.parse(await readFile(path.join(INFRA, 'prometheus/alerts.yml'), 'utf8')) as { groups: { rules: { alert: string; expr: string }[] }[] };
    const exprs = new Map<string, string>();
    for (const [where, expr] of dashboardExprs(dashboard)) exprs.set(where, expr);
    for (const rule of alerts.groups.flatMap((g) => g.rules)) exprs.set(`alert ${rule.alert}`, measuredSide(rule.expr));
    let empty: string[] = [];
    await eventually(
      async () => {
        const results = await Promise.all([...exprs].map(async ([where, expr]) => ((await query(expr)).result.length ? null : `${where}: ${expr}`)));
        empty = results.filter((r) => r !== null);
        return empty.length === 0;
      },
      'data for every expression',
      30_000,
    ).catch(() => assert.fail(`no data for:\n${empty.join('\n')}`));
    // The agent counted the crashes (its user code's: reason "replaced"), and they show in the crash-loop alert's measure.
    const crashes = async () => Number(((await query('sum(embers_replica_exits_total{function="boom",reason!="stopped"})')).result[0] as { value: [number, string] } | undefined)?.value[1] ?? 0);
    // One: the request that crashed its user code ran alone there, so it is answered, not run again (decisions/007).
    await eventually(async () => (await crashes()) >= 1, 'the crash of boom\'s replica in Prometheus');
  });
});

interface Panel {
  title?: string;
  type: string;
  datasource?: { type: string; uid: string };
  targets?: { expr?: string; datasource?: { uid: string } }[];
  panels?: Panel[];
}
interface Dashboard {
  schemaVersion: number;
  panels: Panel[];
  templating: { list: { name: string; type: string; query?: string | { query: string } }[] };
}

/** Each expression of the dashboard's panels and query variables, with the variables Grafana fills in given values. */
function dashboardExprs(d: Dashboard): [string, string][] {
  const fill = (expr: string) => expr.replace(/\$\{?(\w+)\}?/g, (m, name: string) => DASHBOARD_VARIABLES[name] ?? m);
  const out: [string, string][] = [];
  const walk = (panels: Panel[]) => {
    for (const panel of panels) {
      for (const target of panel.targets ?? []) if (target.expr) out.push([`panel "${panel.title}"`, fill(target.expr)]);
      walk(panel.panels ?? []);
    }
  };
  walk(d.panels);
  for (const v of d.templating.list) {
    if (v.type !== 'query') continue;
    const q = typeof v.query === 'string' ? v.query : (v.query?.query ?? '');
    // Grafana's label_values(metric, label) lists the label's values where the metric has series.
    const m = /^label_values\((.+),\s*(\w+)\)$/.exec(q.trim());
    assert.ok(m, `variable ${v.name}: ${q} is label_values(metric, label)`);
    out.push([`variable ${v.name}`, `group by (${m[2]}) (${fill(m[1])})`]);
  }
  for (const [where, expr] of out) assert.doesNotMatch(expr, /\$/, `${where}: a variable the test does not fill in`);
  return out;
}

/**
 * The measured side of an alert's `<expr> <comparison> <number>`: the one comparison outside
 * every bracket and quote (label matchers' `=`, `!=`, `=~` are inside braces), a number on its right.
 */
function measuredSide(expr: string): string {
  // The expression with what is inside brackets and quotes blanked out: what is left is its top level.
  let depth = 0;
  let quote = '';
  let top = '';
  for (let i = 0; i < expr.length; i++) {
    const c = expr[i];
    const inside = depth > 0 || quote !== '';
    if (quote) {
      if (c === '\\') {
        top += '  ';
        i++;
        continue;
      }
      if (c === quote) quote = '';
    } else if (c === '"' || c === "'" || c === '`') quote = c;
    else if ('({['.includes(c)) depth++;
    else if (')}]'.includes(c)) depth--;
    top += inside || quote !== '' || depth > 0 ? ' ' : c;
  }
  assert.doesNotMatch(top, /\b(and|or|unless)\b/, `no set operator at the top level of: ${expr}`);
  const comparisons = [...top.matchAll(/==|!=|>=|<=|>|</g)];
  assert.equal(comparisons.length, 1, `one comparison at the top level of: ${expr}`);
  const at = comparisons[0].index;
  const right = expr.slice(at + comparisons[0][0].length).trim();
  assert.match(right, /^(bool\s+)?-?[\d.]+(e[-+]?\d+)?$/, `a number right of the comparison in: ${expr}`);
  return expr.slice(0, at).trim();
}
