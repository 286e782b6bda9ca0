// Tenants, API keys and HTTPS on a real platform: isolation between tenants, scopes, admin-only
// routes, revocation across gateways, hashed storage, and the CLI over TLS.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { after, before, describe, it } from 'node:test';
import { EmbersClient } from '../../cli/client.ts';
import { deployFile } from '../../cli/deploy.ts';
import { loadConfig } from '../../core/config.ts';
import { createLogger } from '../../core/log.ts';
import { storeFromConfig } from '../../core/s3.ts';
import { hashSecret } from '../../core/tenants.ts';
import { qualifiedName } from '../../core/names.ts';
import { startGateway, type RunningGateway } from '../../gateway/server.ts';
import { ROOT, eventually, fixture, shipped, startTestPlatform, type TestPlatform } from '../helpers/platform.ts';
import { liveStream } from '../../core/keys.ts';

interface Created {
  id: string;
  key: string;
  tenant: string;
  scopes: string[];
}

let p: TestPlatform;
let tmp: string;

before(async () => {
  // One job at a time per replica, so a queue can be held full (the queue-length test).
  p = await startTestPlatform({ EMBERS_REPLICA_CONCURRENCY: '1' });
  tmp = await mkdtemp(path.join(os.tmpdir(), 'embers-tenants-'));
});
after(async () => {
  await p?.close();
  await rm(tmp, { recursive: true, force: true });
});

const as = (key: string) => (route: string, init: RequestInit = {}) => p.fetch(route, { ...init, headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', ...init.headers } });
const admin = (route: string, init: RequestInit = {}) => as(p.adminKey)(route, init);
const post = (body: unknown): RequestInit => ({ method: 'POST', body: JSON.stringify(body) });

async function json<T = Record<string, unknown>>(res: Response | Promise<Response>, status: number): Promise<T> {
  const r = await res;
  const body = await r.text();
  assert.equal(r.status, status, body);
  return JSON.parse(body) as T;
}

async function createTenant(name: string): Promise<string> {
  return (await json<{ id: string }>(admin('/v1/tenants', post({ name })), 201)).id;
}

async function createKey(tenant: string, body: object = {}): Promise<Created> {
  return json<Created>(admin(`/v1/tenants/${tenant}/keys`, post(body)), 201);
}

/** Every route that names a function, as `f` asks them about `name`. */
const probes = (name: string): [string, RequestInit][] => [
  ['/v1/functions', {}],
  [`/v1/functions/${name}`, {}],
  [`/v1/run/${name}`, post({ x: 1 })],
  [`/v1/run/${name}`, { method: 'POST', body: '{}', headers: { prefer: 'respond-async' } }],
  [`/v1/batches?function=${name}`, { method: 'POST', body: '{"custom_id":"a","input":{}}' }],
  ['/v1/batches', post({ function: name, input_uri: 's3://embers/nowhere/input.jsonl' })],
  [`/v1/usage?function=${name}&from=2026-01-01&to=2026-02-01`, {}],
  [`/v1/functions/${name}`, { method: 'DELETE' }],
  [`/v1/functions/${name}?force=true`, { method: 'DELETE' }],
];

/** What `f` is answered for each probe: status, type and body, to compare byte for byte. */
async function answers(f: (route: string, init?: RequestInit) => Promise<Response>, name: string): Promise<string[]> {
  const out: string[] = [];
  for (const [route, init] of probes(name)) {
    const r = await f(route, init);
    out.push(`${init.method ?? 'GET'} ${route} → ${r.status} ${r.headers.get('content-type')}\n${await r.text()}`);
  }
  return out;
}

function embers(args: string[], env: Record<string, string> = {}): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, [path.join(ROOT, 'cli/bin.mjs'), ...args], { cwd: tmp, env: { ...process.env, EMBERS_URL: p.url, ...env }, timeout: 60_000 }, (err, stdout, stderr) =>
      resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr }),
    );
  });
}

describe('tenants and keys', () => {
  let a: string;
  let b: string;
  let keyA: Created;
  let keyB: Created;
  /** What tenant B and the admin key are answered about `echo` while no tenant has one. */
  let noneForB: string[];
  let noneForAdmin: string[];

  before(async () => {
    a = await createTenant('acme');
    b = await createTenant('bravo');
    keyA = await createKey(a, { name: 'acme-ci' });
    keyB = await createKey(b);
    noneForB = await answers(as(keyB.key), 'echo');
    noneForAdmin = await answers(admin, 'echo');
    await deployFile(new EmbersClient({ url: p.url, apiKey: keyA.key }), shipped('echo.ts'));
  });

  it('admin creates tenants and keys; a secret is shown once and never listed', async () => {
    assert.match(a, /^t_[0-9a-f]{12}$/);
    assert.match(keyA.key, /^emb_[A-Za-z0-9_-]{43}$/);
    assert.equal(keyA.tenant, a);
    assert.deepEqual(keyA.scopes, ['run', 'deploy', 'read']);
    const { tenants } = await json<{ tenants: { id: string; name: string }[] }>(admin('/v1/tenants'), 200);
    assert.deepEqual(tenants.map((t) => t.name), ['default', 'acme', 'bravo']);
    const listed = await (await admin(`/v1/tenants/${a}/keys`)).text();
    const { keys } = JSON.parse(listed) as { keys: Record<string, unknown>[] };
    assert.deepEqual(Object.keys(keys[0]).sort(), ['createdAt', 'id', 'name', 'scopes', 'tenant']);
    assert.ok(!listed.includes(keyA.key) && !listed.includes(hashSecret(keyA.key)), 'no secret and no hash in the listing');
  });

  it("another tenant's function is exactly as missing as one no tenant has", async () => {
    const asA = as(keyA.key);
    const names = async (f: typeof asA) => (await json<{ functions: { name: string; tenant: string }[] }>(f('/v1/functions'), 200)).functions.map((x) => [x.name, x.tenant]);
    assert.deepEqual(await names(asA), [['echo', a]]);
    assert.deepEqual(await names(as(p.apiKey)), [], 'the default tenant is a tenant like the others');
    // Show (versions, replicas, cold starts), run, async run, batches, usage, delete: byte for byte.
    assert.deepEqual(await answers(as(keyB.key), 'echo'), noneForB);
    assert.deepEqual(await answers(admin, 'echo'), noneForAdmin, "the admin key acts for the default tenant unless it names one");
    const missing = noneForB.find((x) => x.startsWith('GET /v1/functions/echo'))!;
    assert.match(missing, /→ 404 .*\n\{"error":\{"code":"function_not_found","message":"no function named \\"echo\\""\}\}$/);

    // All of that left it alone.
    assert.deepEqual(await json(asA('/v1/run/echo', post({ from: 'acme' })), 200), { from: 'acme' });
    const own = await json<{ name: string; tenant: string; endpoint: string }>(asA('/v1/functions/echo'), 200);
    assert.deepEqual([own.name, own.tenant], ['echo', a]);
    assert.match(own.endpoint, /\/v1\/run\/echo$/);
  });

  it('two tenants each have their own function under one name; the admin key reaches each with ?tenant=', async () => {
    const asA = as(keyA.key);
    const asB = as(keyB.key);
    const deployed = await deployFile(new EmbersClient({ url: p.url, apiKey: keyB.key }), fixture('echo-tagged.ts'));
    assert.deepEqual([deployed.name, deployed.version, deployed.unchanged], ['echo', 'v1', false]);
    assert.match(deployed.endpoint, /\/v1\/run\/echo$/);

    assert.deepEqual(await json(asA('/v1/run/echo', post({ n: 1 })), 200), { n: 1 });
    assert.deepEqual(await json(asB('/v1/run/echo', post({ n: 2 })), 200), { tagged: { n: 2 }, as: 'echo' });
    assert.deepEqual(await json(admin(`/v1/run/echo?tenant=${a}`, post({ n: 3 })), 200), { n: 3 });
    assert.deepEqual(await json(admin(`/v1/run/echo?tenant=${b}`, post({ n: 4 })), 200), { tagged: { n: 4 }, as: 'echo' });
    const list = async (f: typeof asA, q = '') => (await json<{ functions: { name: string; tenant: string; versions: number }[] }>(f(`/v1/functions${q}`), 200)).functions;
    assert.deepEqual((await list(asB)).map((f) => [f.name, f.tenant, f.versions]), [['echo', b, 1]]);
    assert.deepEqual((await list(admin, `?tenant=${a}`)).map((f) => [f.name, f.tenant]), [['echo', a]]);
    assert.deepEqual(await list(admin), []);
    const shown = await json<{ name: string; tenant: string; manifest: { name: string }; versions: unknown[] }>(admin(`/v1/functions/echo?tenant=${b}`), 200);
    assert.deepEqual([shown.name, shown.tenant, shown.manifest.name, shown.versions.length], ['echo', b, 'echo', 1]);

    // Jobs, batches and usage name it as its tenant does.
    const job = await json<{ id: string }>(asB('/v1/run/echo', { method: 'POST', body: '{"j":1}', headers: { prefer: 'respond-async' } }), 202);
    const done = await eventually(async () => {
      const j = await json<{ status: string; function: string; output?: unknown }>(asB(`/v1/jobs/${job.id}`), 200);
      return j.status === 'succeeded' ? j : null;
    }, 'the job to finish');
    assert.deepEqual([done.function, done.output], ['echo', { tagged: { j: 1 }, as: 'echo' }]);
    const batch = await json<{ id: string; function: string }>(asB('/v1/batches?function=echo', { method: 'POST', body: '{"custom_id":"a","input":{"l":1}}' }), 201);
    assert.equal(batch.function, 'echo');
    await eventually(async () => (await json<{ status: string }>(asB(`/v1/batches/${batch.id}`), 200)).status === 'completed', 'the batch to complete');
    assert.equal((await (await asB(`/v1/batches/${batch.id}/output`)).text()).trim(), '{"custom_id":"a","output":{"tagged":{"l":1},"as":"echo"}}');
    const usage = await eventually(async () => {
      const rows = (await json<{ data: { tenant: string; function: string; requests: number }[] }>(asB('/v1/usage?function=echo'), 200)).data;
      return rows.reduce((n, r) => n + r.requests, 0) >= 3 ? rows : null;
    }, "B's usage records");
    assert.deepEqual([...new Set(usage.map((r) => `${r.tenant} ${r.function}`))], [`${b} echo`]);

    // The CLI sends plain names; --tenant picks the tenant for the admin key.
    const cli = await embers(['run', 'echo', '--data', '{"via":"cli"}', '--tenant', b], { EMBERS_API_KEY: p.adminKey });
    assert.equal(cli.code, 0, cli.stderr);
    assert.deepEqual(JSON.parse(cli.stdout), { tagged: { via: 'cli' }, as: 'echo' });

    // B deletes its own; A's stays, and B is back to having none.
    assert.deepEqual(await json(asB('/v1/functions/echo?force=true', { method: 'DELETE' }), 200), { deleted: 'echo', dropped: 0 });
    assert.deepEqual(await json(asA('/v1/run/echo', post({ n: 5 })), 200), { n: 5 });
    assert.deepEqual(await answers(asB, 'echo'), noneForB);
  });

  it('a tenant key names only its own tenant; the admin key names one that exists', async () => {
    const other = await json<{ error: { code: string } }>(as(keyB.key)(`/v1/functions?tenant=${a}`), 403);
    assert.equal(other.error.code, 'forbidden');
    await json(as(keyB.key)(`/v1/run/ghost?tenant=${a}`, post({})), 403);
    assert.match((await json<{ error: { message: string } }>(admin('/v1/functions?tenant=Not.One'), 400)).error.message, /tenant must be a tenant id/);
    const body = { spec: { name: 'x', inputSchema: {} }, bundle: Buffer.from('export default 1').toString('base64') };
    assert.match((await json<{ error: { message: string } }>(admin('/v1/functions?tenant=t_000000000000', post(body)), 404)).error.message, /no tenant with id "t_000000000000"/);
  });

  it('scopes: a run-only key runs but cannot deploy, delete, read or upload models', async () => {
    const runOnly = await createKey(a, { scopes: ['run'] });
    const f = as(runOnly.key);
    assert.deepEqual(await json(f('/v1/run/echo', post({ ok: true })), 200), { ok: true });
    const deploy = await json<{ error: { code: string; message: string } }>(f('/v1/functions', post({})), 403);
    assert.equal(deploy.error.code, 'forbidden');
    assert.match(deploy.error.message, /lacks the "deploy" scope/);
    assert.match((await json<{ error: { message: string } }>(f('/v1/functions/echo', { method: 'DELETE' }), 403)).error.message, /"deploy"/);
    assert.match((await json<{ error: { message: string } }>(f('/v1/functions'), 403)).error.message, /"read"/);
    await json(f(`/v1/models/sha256/${'0'.repeat(64)}`, { method: 'PUT', body: 'x' }), 403);

    const deployOnly = await createKey(a, { scopes: ['deploy', 'read'] });
    assert.match((await json<{ error: { message: string } }>(as(deployOnly.key)('/v1/run/echo', post({})), 403)).error.message, /"run"/);
  });

  it('tenant keys, the platform key included, cannot use the admin routes', async () => {
    for (const key of [keyA.key, p.apiKey]) {
      const res = await json<{ error: { code: string; message: string } }>(as(key)('/v1/tenants'), 403);
      assert.equal(res.error.code, 'forbidden');
      assert.match(res.error.message, /admin key/);
      await json(as(key)('/v1/tenants', post({ name: 'mine' })), 403);
      await json(as(key)(`/v1/tenants/${a}/keys`, post({})), 403);
    }
  });

  it("/metrics, which names every tenant's functions, is the admin key's alone", async () => {
    // Its labels carry function keys (<tenant id>.echo): open, it told anyone which tenants
    // exist, what they deployed and how much they run it.
    const metrics = await p.fetch('/metrics', { headers: { authorization: `Bearer ${p.adminKey}` } });
    assert.equal(metrics.status, 200);
    assert.match(await metrics.text(), new RegExp(`function="${a}\\.echo"`));
    for (const headers of [{}, { authorization: 'Bearer nope' }] as Record<string, string>[]) {
      const res = await fetch(`${p.url}/metrics`, { headers });
      assert.equal(res.status, 401);
      assert.doesNotMatch(await res.text(), new RegExp(a));
    }
    for (const key of [keyB.key, keyA.key, p.apiKey]) {
      const res = await json<{ error: { code: string; message: string } }>(as(key)('/metrics'), 403);
      assert.match(res.error.message, /admin key/);
    }
  });

  it('bad admin input is answered 400/404/409 with a reason', async () => {
    const cases: [string, RequestInit, number, RegExp][] = [
      ['/v1/tenants', post({}), 400, /invalid tenant: .*name/s],
      ['/v1/tenants', post({ name: '' }), 400, /name must not be empty/],
      ['/v1/tenants', post({ name: 'x', plan: 'gold' }), 400, /plan/],
      ['/v1/tenants', { method: 'POST', body: '{nope' }, 400, /not valid JSON/],
      ['/v1/tenants', { method: 'POST', body: '' }, 400, /body is empty/],
      [`/v1/tenants/${a}/keys`, post({ scopes: ['admin'] }), 400, /scopes are "run", "deploy", "read"/],
      [`/v1/tenants/${a}/keys`, post({ scopes: 'run' }), 400, /scopes/],
      [`/v1/tenants/${a}/keys`, post({ name: 42 }), 400, /name/],
      ['/v1/tenants/t_000000000000/keys', post({}), 404, /no tenant with id "t_000000000000"/],
      [`/v1/tenants/${a}/keys/key_nope`, { method: 'DELETE' }, 404, /has no key key_nope/],
      ['/v1/tenants/default', { method: 'DELETE' }, 409, /default tenant .* cannot be deleted/],
    ];
    for (const [route, init, status, reason] of cases) {
      const res = await json<{ error: { message: string } }>(admin(route, init), status);
      assert.match(res.error.message, reason, `${init.method} ${route}`);
    }
  });

  it('a revoked key gets 401 on the very next request, on another gateway too', async () => {
    const config = loadConfig({ ...process.env, EMBERS_S3_ENDPOINT: p.s3Endpoint });
    const store = storeFromConfig(config);
    let second: RunningGateway | undefined;
    try {
      second = await startGateway({
        redisTarget: p.redisTarget,
        store,
        apiKey: p.apiKey,
        port: 0,
        host: '127.0.0.1',
        log: createLogger('test', 'warn'),
        maxBodyBytes: 1024 * 1024,
        maxBundleBytes: 1024 * 1024,
        queueTimeoutMs: 10_000,
      });
      const key = await createKey(a, { name: 'short-lived' });
      const viaSecond = (route = '/v1/functions', init: RequestInit = {}) =>
        fetch(`${second!.url}${route}`, { ...init, headers: { authorization: `Bearer ${key.key}`, 'content-type': 'application/json', ...init.headers } });
      assert.equal((await viaSecond()).status, 200);
      // Runs take the key from each gateway's cache: warm both, sync and async.
      for (const run of [viaSecond, as(key.key)]) {
        assert.deepEqual(await json(run('/v1/run/echo', post({ warm: 1 })), 200), { warm: 1 });
        await json(run('/v1/run/echo', { method: 'POST', body: '{}', headers: { prefer: 'respond-async' } }), 202);
      }
      // The stream's last id moves with every XADD, deleted entries included.
      const lastAdded = async () => {
        const info = (await p.redis().xinfo('STREAM', liveStream(qualifiedName(a, 'echo')))) as unknown[];
        return info[info.indexOf('last-generated-id') + 1];
      };
      const addedBefore = await lastAdded();
      await json(admin(`/v1/tenants/${a}/keys/${key.id}`, { method: 'DELETE' }), 200);
      const res = await json<{ error: { code: string; message: string } }>(viaSecond(), 401);
      assert.equal(res.error.code, 'unauthorized');
      assert.match(res.error.message, /this key was revoked/);
      // The cached key still routes the request, but its enqueue finds it revoked: nothing is queued.
      for (const run of [viaSecond, as(key.key)]) {
        assert.match((await json<{ error: { message: string } }>(run('/v1/run/echo', post({})), 401)).error.message, /this key was revoked/);
        assert.match((await json<{ error: { message: string } }>(run('/v1/run/echo', { method: 'POST', body: '{}', headers: { prefer: 'respond-async' } }), 401)).error.message, /this key was revoked/);
      }
      assert.equal(await lastAdded(), addedBefore, 'a revoked key queued a request');
      const { keys } = await json<{ keys: { id: string; revokedAt?: string }[] }>(admin(`/v1/tenants/${a}/keys`), 200);
      assert.ok(keys.find((k) => k.id === key.id)?.revokedAt);
    } finally {
      await second?.close();
      store.destroy();
    }
  });

  it('deleting a tenant revokes its keys', async () => {
    const c = await createTenant('charlie');
    const keyC = await createKey(c);
    await json(as(keyC.key)('/v1/functions'), 200);
    assert.deepEqual(await json(admin(`/v1/tenants/${c}`, { method: 'DELETE' }), 200), { deleted: c, revokedKeys: 1 });
    assert.match((await json<{ error: { message: string } }>(as(keyC.key)('/v1/functions'), 401)).error.message, /revoked/);
    await json(admin(`/v1/tenants/${c}/keys`, post({})), 404);
    await json(admin(`/v1/tenants/${c}`, { method: 'DELETE' }), 404);
  });

  it('stores no secret in clear: Redis holds only hashes', async () => {
    const redis = p.redis();
    const secrets = [keyA.key, keyB.key, p.apiKey, p.adminKey];
    let hashesSeen = 0;
    for (const k of await redis.keys('*')) {
      const type = await redis.type(k);
      const values =
        type === 'string' ? [await redis.get(k)] : type === 'hash' ? Object.entries(await redis.hgetall(k)).flat() : type === 'set' ? await redis.smembers(k) : type === 'list' ? await redis.lrange(k, 0, -1) : [];
      for (const text of [k, ...values.map(String)]) {
        for (const s of secrets) assert.ok(!text.includes(s), `a secret is stored in clear under ${k}`);
        if (text.includes(hashSecret(keyA.key))) hashesSeen++;
      }
    }
    assert.ok(hashesSeen >= 1, 'the key is found by its hash');
  });

  it('the CLI manages tenants and keys with the admin key', async () => {
    const env = { EMBERS_ADMIN_KEY: p.adminKey };
    for (const cmd of [['tenants'], ['tenants', 'create'], ['tenants', 'list'], ['tenants', 'delete'], ['keys'], ['keys', 'create'], ['keys', 'list'], ['keys', 'revoke']]) {
      const r = await embers([...cmd, '--help']);
      assert.equal(r.code, 0, `${cmd.join(' ')} --help: ${r.stderr}`);
      assert.match(r.stdout, /Usage: embers/);
    }
    const created = await embers(['tenants', 'create', 'delta', '--json'], env);
    assert.equal(created.code, 0, created.stderr);
    const id = (JSON.parse(created.stdout) as { id: string }).id;
    const list = await embers(['tenants', 'list'], env);
    assert.match(list.stdout, /^ID\s+NAME\s+CREATED/m);
    assert.match(list.stdout, new RegExp(`^${id}\\s+delta`, 'm'));

    const key = await embers(['keys', 'create', id, '--name', 'ci', '--scopes', 'run,read'], env);
    assert.equal(key.code, 0, key.stderr);
    const secret = key.stdout.trim();
    assert.match(secret, /^emb_\S+$/);
    assert.match(key.stderr, /will not be shown again/);
    const listed = await embers(['keys', 'list', id], env);
    assert.match(listed.stdout, /^key_[0-9a-f]+\s+ci\s+run,read\s/m);
    assert.ok(!listed.stdout.includes(secret));
    const keyId = /^(key_[0-9a-f]+)/m.exec(listed.stdout)![1];

    assert.equal((await embers(['functions'], { EMBERS_API_KEY: secret })).code, 0);
    const revoked = await embers(['keys', 'revoke', id, keyId], env);
    assert.match(revoked.stdout, new RegExp(`revoked ${keyId}`));
    assert.match((await embers(['functions'], { EMBERS_API_KEY: secret })).stderr, /401: this key was revoked/);

    const mistakes: [string[], number, RegExp, Record<string, string>][] = [
      [['tenants', 'list'], 1, /403: managing tenants and keys needs the admin key/, { EMBERS_ADMIN_KEY: p.apiKey }],
      [['tenants', 'list'], 2, /no admin key: pass --admin-key/, { EMBERS_ADMIN_KEY: '' }],
      [['keys', 'create', id, '--scopes', 'run,root'], 2, /scopes are a comma-separated list of run, deploy, read/, env],
      [['keys', 'list', 't_000000000000'], 1, /404: no tenant with id/, env],
    ];
    for (const [args, code, message, e] of mistakes) {
      const r = await embers(args, e);
      assert.equal(r.code, code, `embers ${args.join(' ')}: ${r.stderr}`);
      assert.match(r.stderr, message, `embers ${args.join(' ')}`);
    }
    const deleted = await embers(['tenants', 'delete', id], env);
    assert.match(deleted.stdout, /deleted tenant .*; revoked 0 keys/);
  });

  describe('jobs, batches, usage and quotas stay inside a tenant', () => {
    let c: Created;
    let d: Created;
    const asC = (route: string, init?: RequestInit) => as(c.key)(route, init);
    const asD = (route: string, init?: RequestInit) => as(d.key)(route, init);

    before(async () => {
      c = await createKey(await createTenant('charlie'));
      d = await createKey(await createTenant('delta'));
      await deployFile(new EmbersClient({ url: p.url, apiKey: c.key }), fixture('tight.ts'));
    });

    it('another tenant cannot read or cancel a job, or read, cancel or list a batch', async () => {
      const job = await json<{ id: string }>(asC('/v1/run/tight', { method: 'POST', body: '{}', headers: { prefer: 'respond-async' } }), 202);
      await json(asD(`/v1/jobs/${job.id}`), 404);
      await json(asD(`/v1/jobs/${job.id}`, { method: 'DELETE' }), 404);
      const done = await eventually(async () => {
        const j = await json<{ status: string }>(asC(`/v1/jobs/${job.id}`), 200);
        return j.status === 'succeeded' ? j : null;
      }, 'the job to finish');
      assert.equal(done.status, 'succeeded');

      const batch = await json<{ id: string }>(asC('/v1/batches?function=tight', { method: 'POST', body: '{"custom_id":"a","input":{}}\n{"custom_id":"b","input":{}}' }), 201);
      await json(asD('/v1/batches?function=tight', { method: 'POST', body: '{"custom_id":"x","input":{}}' }), 404);
      await json(asD(`/v1/batches/${batch.id}`), 404);
      await json(asD(`/v1/batches/${batch.id}/cancel`, { method: 'POST' }), 404);
      await json(asD(`/v1/batches/${batch.id}/output`), 404);
      assert.deepEqual((await json<{ data: unknown[] }>(asD('/v1/batches'), 200)).data, []);
      const listed = await json<{ data: { id: string }[] }>(asC('/v1/batches'), 200);
      assert.deepEqual(listed.data.map((b) => b.id), [batch.id]);
      await eventually(async () => (await json<{ status: string }>(asC(`/v1/batches/${batch.id}`), 200)).status === 'completed', 'the batch to complete');
    });

    it('usage: one record per request, priced per function, readable only by its tenant', async () => {
      const usage = async (f: typeof asC, q = '') => (await json<{ data: { tenant: string; function: string; requests: number; computeSeconds: number; cost: number }[] }>(f(`/v1/usage?granularity=hour${q}`), 200)).data;
      const before = (await usage(asC)).find((r) => r.function === 'tight')?.requests ?? 0;
      await json(asC('/v1/run/tight', post({ ms: 10 })), 200);
      const rows = await eventually(async () => {
        const r = (await usage(asC)).filter((x) => x.function === 'tight');
        return r.reduce((a, x) => a + x.requests, 0) === before + 1 ? r : null;
      }, 'the usage record');
      const total = rows.reduce((a, x) => ({ requests: a.requests + x.requests, compute: a.compute + x.computeSeconds, cost: a.cost + x.cost }), { requests: 0, compute: 0, cost: 0 });
      // tight charges 0.5 per request and 2 per compute-second.
      assert.ok(Math.abs(total.cost - (total.requests * 0.5 + total.compute * 2)) < 1e-4, JSON.stringify(total));
      assert.ok(rows.every((r) => r.tenant !== d.tenant));
      assert.deepEqual(await usage(asD), []);
      await json(asD(`/v1/usage?tenant=${c.tenant}`), 403);
      assert.ok((await usage(admin, `&tenant=${c.tenant}`)).some((r) => r.function === 'tight'));
      await json(asC('/v1/usage?from=yesterday'), 400);
      await json(asC('/v1/usage?since=2026-11-01'), 400);

      // The console's per-minute roll-ups count the same requests as the usage records.
      const all = (await usage(asC)).filter((x) => x.function === 'tight').reduce((a, x) => a + x.requests, 0);
      const series = await json<{ functions: { name: string; summary: { requests: number } }[] }>(asC('/v1/series?minutes=240&function=tight'), 200);
      assert.deepEqual(series.functions.map((f) => [f.name, f.summary.requests]), [['tight', all]]);
      assert.deepEqual((await json<{ functions: { name: string }[] }>(asD('/v1/series'), 200)).functions.map((f) => f.name).includes('tight'), false);
      await json(asD('/v1/series?function=tight'), 404);
      await json(asD(`/v1/series?tenant=${c.tenant}`), 403);
      await json(asC('/v1/series?minutes=0'), 400);
    });

    it('usage is counted once when a replica is killed mid-job and the job runs again', async () => {
      const redis = p.redis();
      const job = await json<{ id: string }>(asC('/v1/run/tight', { method: 'POST', body: JSON.stringify({ ms: 1500 }), headers: { prefer: 'respond-async' } }), 202);
      await eventually(async () => (await json<{ status: string }>(asC(`/v1/jobs/${job.id}`), 200)).status === 'running', 'the job to start');
      // Listed for its own tenant only.
      assert.ok((await json<{ data: { id: string }[] }>(asC('/v1/jobs'), 200)).data.some((j) => j.id === job.id));
      assert.ok(!(await json<{ data: { id: string }[] }>(asD('/v1/jobs'), 200)).data.some((j) => j.id === job.id));
      for (const r of p.agent.running()) if (r.fn === qualifiedName(c.tenant, 'tight') && r.pid) process.kill(r.pid, 'SIGKILL');
      const done = await eventually(async () => {
        const j = await json<{ status: string }>(asC(`/v1/jobs/${job.id}`), 200);
        return j.status === 'succeeded' ? j : null;
      }, 'the retried job to finish', 60_000);
      assert.equal(done.status, 'succeeded');
      // The job reads succeeded a step before its usage record is written (in the finishing call
      // that deletes its stream entry): wait for that call.
      await eventually(async () => (await redis.xlen(liveStream(qualifiedName(c.tenant, 'tight')))) === 0, "the retried job's finishing call (its usage record)");
      const records = (await redis.xrange('embers:usage:records', '-', '+')).map(([, f]) => JSON.parse(f[1]) as { id: string; tenant: string; key: string; fn: string });
      const mine = records.filter((r) => r.id === job.id);
      assert.equal(mine.length, 1);
      assert.equal(mine[0].tenant, c.tenant);
      assert.equal(mine[0].key, c.id);
      // The record was written with the entry's acknowledgement: no seen key per live request.
      assert.equal(await redis.exists(`embers:usage:seen:${job.id}`), 0);
    });

    it('quotas: requests per second, requests in flight and a full queue are 429 with Retry-After', async () => {
      const limited = await createKey(c.tenant, { limits: { rps: 2 } });
      const burst = await Promise.all(Array.from({ length: 6 }, () => as(limited.key)('/v1/run/tight', post({}))));
      const refused = burst.filter((r) => r.status === 429);
      assert.ok(refused.length >= 2, `at most 2 of 6 per second get through (${burst.map((r) => r.status)})`);
      assert.equal(refused[0].headers.get('retry-after'), '1');
      assert.equal(((await refused[0].json()) as { error: { code: string } }).error.code, 'rate_limited');

      const single = await createKey(c.tenant, { limits: { concurrency: 1 } });
      const slow = as(single.key)('/v1/run/tight', post({ ms: 1500 }));
      await eventually(async () => (await p.redis().zcard(`embers:quota:inflight:${c.tenant}:${single.id}`)) === 1, 'the slow request to hold its slot');
      const second = await as(single.key)('/v1/run/tight', post({}));
      assert.equal(second.status, 429);
      assert.equal(((await second.json()) as { error: { code: string } }).error.code, 'too_many_in_flight');
      assert.equal((await slow).status, 200);
      assert.equal((await as(single.key)('/v1/run/tight', post({}))).status, 200, 'the slot is free again');

      // One replica taking one job at a time, and a queue of 2: the fourth waiting request is refused.
      const submit = () => asC('/v1/run/tight', { method: 'POST', body: JSON.stringify({ ms: 3000 }), headers: { prefer: 'respond-async' } });
      const first = await json<{ id: string }>(submit(), 202);
      await eventually(async () => (await json<{ status: string }>(asC(`/v1/jobs/${first.id}`), 200)).status === 'running', 'the first to run');
      const statuses: number[] = [];
      for (let i = 0; i < 3; i++) {
        statuses.push((await submit()).status);
        await new Promise((r) => setTimeout(r, 400)); // past the gateway's 250 ms queue-length cache
      }
      assert.deepEqual(statuses, [202, 202, 429]);
      const full = await submit();
      assert.equal(full.status, 429);
      assert.equal(full.headers.get('retry-after'), '1');
      assert.equal(((await full.json()) as { error: { code: string } }).error.code, 'queue_full');
      // Each refusal is counted by function and code.
      const metrics = await (await p.fetch('/metrics', { headers: { authorization: `Bearer ${p.adminKey}` } })).text();
      // Metrics name a function by its key: a tenant's own name may be another's too.
      const refusedCount = (code: string) => Number(new RegExp(`^embers_requests_refused_total\\{function="${qualifiedName(c.tenant, 'tight')}",code="${code}"\\} (\\d+)$`, 'm').exec(metrics)?.[1] ?? 0);
      assert.equal(refusedCount('rate_limited'), refused.length);
      assert.equal(refusedCount('too_many_in_flight'), 1);
      assert.equal(refusedCount('queue_full'), 2);
    });
  });
});

describe('HTTPS', () => {
  let tls: TestPlatform;
  let cert: string;

  before(async () => {
    cert = path.join(tmp, 'cert.pem');
    const key = path.join(tmp, 'key.pem');
    await promisify(execFile)('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '1', '-subj', '/CN=localhost', '-addext', 'subjectAltName=DNS:localhost,IP:127.0.0.1', '-keyout', key, '-out', cert]);
    tls = await startTestPlatform({ EMBERS_TLS_CERT: cert, EMBERS_TLS_KEY: key });
    delete process.env.EMBERS_TLS_CERT;
    delete process.env.EMBERS_TLS_KEY;
    await deployFile(new EmbersClient({ url: tls.url, apiKey: tls.apiKey, ca: await readFile(cert, 'utf8') }), shipped('echo.ts'));
  });
  after(() => tls?.close());

  it('serves https:// and the CLI works against it with EMBERS_CA_CERT', async () => {
    assert.match(tls.url, /^https:\/\/127\.0\.0\.1:\d+$/);
    const env = { EMBERS_URL: tls.url, EMBERS_API_KEY: tls.apiKey, EMBERS_CA_CERT: cert };
    const list = await embers(['functions'], env);
    assert.equal(list.code, 0, list.stderr);
    assert.match(list.stdout, /^echo\s+v1/m);
    const run = await embers(['run', 'echo', '--data', '{"over":"tls"}'], env);
    assert.equal(run.code, 0, run.stderr);
    assert.deepEqual(JSON.parse(run.stdout), { over: 'tls' });
  });

  it('without the CA the CLI says which variable to set', async () => {
    const r = await embers(['functions'], { EMBERS_URL: tls.url, EMBERS_API_KEY: tls.apiKey });
    assert.equal(r.code, 1);
    assert.match(r.stderr, /cannot trust the TLS certificate of https:\/\/127\.0\.0\.1:\d+ .*set EMBERS_CA_CERT/);
  });
});
