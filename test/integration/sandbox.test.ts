// Tenant code is hostile: a function that looks for the platform's credentials and data, reaches
// for Redis, S3 and the gateway, forks, fills its /tmp and exhausts its memory gets nothing, is
// contained, and its neighbour never notices.
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { probeSandbox } from '../../runtime/replica/sandbox.ts';
import { eventually, fixture, ROOT, shipped, startTestPlatform, type TestPlatform } from '../helpers/platform.ts';

const support = probeSandbox();
const skip = support.isolates ? false : `this host cannot sandbox user code: ${support.missing.join('; ')}`;

const MEMORY = 256 * 1024 ** 2;
const TMP = 8 * 1024 ** 2;
const PIDS = 128;

let p: TestPlatform;

before(async () => {
  if (skip) return;
  p = await startTestPlatform({ EMBERS_REPLICA_MEMORY_BYTES: String(MEMORY), EMBERS_REPLICA_TMP_BYTES: String(TMP), EMBERS_REPLICA_PIDS: String(PIDS), EMBERS_HANDLER_GRACE_MS: '500' });
  for (const f of [shipped('echo.ts'), fixture('hostile.ts'), fixture('spinner.ts')]) await p.deploy(f);
});
after(() => p?.close());

const run = (name: string, body: unknown) => p.fetch(`/v1/run/${name}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });

describe('sandboxed user code', { skip }, () => {
  it('finds no credential, no platform file and no network', async () => {
    const adminKey = (await readFile(path.join(p.dataDir, 'admin-key'), 'utf8').catch(() => '')).trim();
    const files = [path.join(p.dataDir, 'admin-key'), path.join(p.dataDir, 'api-key'), path.join(p.dataDir, 'redis', 'dump.rdb'), '/etc/passwd', '/root/.bashrc', '/proc/1/root/etc/hostname', path.join(ROOT, '.git', 'config')];
    const urls = [p.redisUrl, p.s3Endpoint, p.url].filter(Boolean) as string[];
    const res = await run('hostile', { attempt: 'look', files, urls });
    assert.equal(res.status, 200);
    const seen = (await res.json()) as { env: Record<string, string>; argv: string[]; execArgv: string[]; cmdline: Record<string, string>; mountinfo: string; uid: number; files: Record<string, string>; connect: Record<string, string>; root: string[]; bundleWrite: string; userns: number | null };
    // Logging settings only: no Redis URL, S3 endpoint or key, API or admin key.
    for (const name of Object.keys(seen.env)) assert.ok(!/REDIS|S3|KEY|SECRET|TOKEN|AWS|PASSWORD/i.test(name), `${name} is in the user code's environment`);
    // (Not `connect`: it names the URLs the test sent.)
    const everything = JSON.stringify({ env: seen.env, argv: seen.argv, files: seen.files });
    for (const secret of [p.apiKey, adminKey, p.redisUrl, p.s3Endpoint].filter((s) => s && s.length > 8)) assert.ok(!everything.includes(secret!), 'a platform secret reached the user code');
    for (const [file, outcome] of Object.entries(seen.files)) assert.doesNotMatch(outcome, /^read/, `${file} was readable`);
    for (const [url, outcome] of Object.entries(seen.connect)) assert.notEqual(outcome, 'connected', `${url} was reachable`);
    // The platform's code and packages are there, read-only, where they are outside; nothing else of the host.
    assert.ok(!seen.root.includes('root') && !seen.root.includes('home') && !seen.root.includes('var'), `the host's folders are visible: ${seen.root.join(' ')}`);
    assert.match(seen.bundleWrite, /EROFS|EACCES|EPERM/);
    if (support.ownUid) assert.notEqual(seen.uid, 0);
    if (support.noNestedUserns) assert.notEqual(seen.userns, 0, 'made a user namespace');
    // Nothing it was started with names a host path: not the data dir, not the platform's checkout.
    const started = { argv: seen.argv, execArgv: seen.execArgv, ...seen.cmdline };
    assert.match(seen.cmdline['/proc/1/cmdline'], /^bwrap --args 0 /);
    assert.match(seen.cmdline['/proc/self/cmdline'], /\/opt\/embers\/app\//);
    for (const host of [p.dataDir, ROOT.replace(/\/$/, '')]) assert.ok(!JSON.stringify(started).includes(host), `${host} in ${JSON.stringify(started)}`);
  });

  it('forks only up to its limit, and fills only its own small /tmp', async () => {
    const forks = (await (await run('hostile', { attempt: 'fork', forks: PIDS * 2 })).json()) as { started: number; refused: string };
    assert.ok(forks.started < PIDS, `started ${forks.started} processes`);
    assert.equal(forks.refused, 'EAGAIN');
    const tmp = (await (await run('hostile', { attempt: 'tmp' })).json()) as { written: number; error: string };
    assert.equal(tmp.error, 'ENOSPC');
    assert.ok(tmp.written <= TMP);
  });

  it('over its memory limit, is killed, answered 503 replica_oom, recorded and replaced; the neighbour never notices', async () => {
    const before = await run('echo', { n: 1 });
    assert.equal(before.status, 200);
    const res = await run('hostile', { attempt: 'memory' });
    assert.equal(res.status, 503);
    const err = ((await res.json()) as { error: { code: string; message: string } }).error;
    assert.equal(err.code, 'replica_oom');
    assert.match(err.message, /256 MiB/);
    assert.equal((await run('echo', { n: 2 })).status, 200);
    // The failure is kept with the function's starts, phase and limit included.
    const shown = await eventually(async () => {
      const fn = (await (await p.fetch('/v1/functions/hostile')).json()) as { coldStarts: { error?: { phase: string; message: string } }[] };
      return fn.coldStarts.find((c) => c.error?.message.includes('out of memory'));
    }, 'the out-of-memory failure in the function record');
    assert.equal(shown.error!.phase, 'run');
    assert.match(shown.error!.message, /256 MiB/);
    // A fresh replica serves the function again.
    await eventually(async () => (await run('hostile', { attempt: 'tmp' })).status === 200, 'a replacement replica', 60_000);
  });

  it('a handler that never yields its thread is answered, its replica replaced, and the neighbour serves meanwhile', async () => {
    assert.equal((await run('spinner', { spin: false })).status, 200);
    const spinning = run('spinner', { spin: true });
    await new Promise((r) => setTimeout(r, 500));
    assert.equal((await run('echo', { beside: 'a spinning handler' })).status, 200);
    const res = await spinning;
    assert.ok([500, 504].includes(res.status), `answered ${res.status}`);
    await eventually(async () => (await run('spinner', { spin: false })).status === 200, 'a fresh spinner replica', 60_000);
  });
});
