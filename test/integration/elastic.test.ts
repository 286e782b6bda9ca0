// Elasticity on real processes: scale from zero and back, scale with load, cold-start phases,
// a replica killed under load, and two node agents losing one. Windows are shortened by config.
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { ROOT, eventually, fixture, startTestPlatform, type TestPlatform } from '../helpers/platform.ts';

let p: TestPlatform;

const ENV = {
  EMBERS_SCALE_STABLE_WINDOW_S: '2',
  EMBERS_SCALE_PANIC_WINDOW_S: '1',
  EMBERS_SCHEDULER_TICK_MS: '200',
  EMBERS_NODE_TTL_MS: '2000',
  EMBERS_HANDLER_GRACE_MS: '500',
};

before(async () => {
  p = await startTestPlatform(ENV);
  await p.deploy(fixture('sleepy.ts'));
  await p.deploy(fixture('tiny.ts'));
  await p.deploy(fixture('broken.ts'));
  await p.deploy(fixture('stubborn.ts'));
});
after(() => p?.close());

const run = (name: string, body: unknown) => p.fetch(`/v1/run/${name}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
const replicasOf = (fn: string) => p.agent.running().filter((r) => r.fn === fn);
interface FnView {
  replicas: { id: string; state: string; node?: string; jobs: { completed: number } }[];
  coldStarts: (Record<string, number> & { replica: string })[];
}
const view = async (fn: string) => (await (await p.fetch(`/v1/functions/${fn}`)).json()) as FnView;

describe('scale to zero and back', () => {
  it('a deployed function with minReplicas 0 runs nothing until called', async () => {
    assert.equal(replicasOf('sleepy').length, 0);
  });

  it('the first request starts a replica and says it waited for a cold start; the next one does not', async () => {
    const first = await run('sleepy', { ms: 1, tag: 'first' });
    assert.equal(first.status, 200);
    assert.match(first.headers.get('server-timing') ?? '', /^cold;dur=[\d.]+, queue;dur=/);
    const phases = Object.fromEntries((first.headers.get('embers-cold-start') ?? '').split(';').map((kv) => kv.split('=')));
    for (const phase of ['spawn', 'bundle', 'model_fetch', 'model_load', 'setup', 'warmup', 'total']) assert.ok(Number(phases[phase]) >= 0, `phase ${phase} in ${JSON.stringify(phases)}`);
    const second = await run('sleepy', { ms: 1 });
    assert.doesNotMatch(second.headers.get('server-timing') ?? '', /cold/);
    assert.equal(second.headers.get('embers-cold-start'), null);
  });

  it('goes back to zero once idle past idleTimeoutS', async () => {
    await eventually(async () => replicasOf('sleepy').length === 0 && (await view('sleepy')).replicas.length === 0, 'sleepy to scale to zero', 30_000);
  });
});

describe('scale with load', () => {
  it('adds replicas under concurrent load, answers everything, and scales down after', async () => {
    let peak = 0;
    const watch = setInterval(() => (peak = Math.max(peak, replicasOf('sleepy').length)), 50);
    const results = await Promise.all(Array.from({ length: 12 }, (_, i) => run('sleepy', { ms: 1_500, tag: `load-${i}` })));
    clearInterval(watch);
    assert.deepEqual(new Set(results.map((r) => r.status)), new Set([200]));
    const tags = (await Promise.all(results.map((r) => r.json()))).map((b) => (b as { tag: string }).tag).sort();
    assert.deepEqual(tags, Array.from({ length: 12 }, (_, i) => `load-${i}`).sort());
    assert.ok(peak >= 2, `expected more than one replica under load, saw at most ${peak}`);
    assert.ok(peak <= 3, `never more than maxReplicas: ${peak}`);
    await eventually(async () => replicasOf('sleepy').length === 0, 'sleepy to scale back down to zero', 30_000);
  });
});

describe('cold starts', () => {
  it('records every phase; a second start finds its model on disk (model_fetch 0)', async () => {
    assert.equal((await run('tiny', { n: 2 })).status, 200);
    await eventually(async () => replicasOf('tiny').length === 0, 'tiny to go idle', 30_000);
    assert.equal((await run('tiny', {})).status, 200);
    const { coldStarts } = await view('tiny');
    assert.equal(coldStarts.length, 2);
    const [second, first] = coldStarts;
    for (const c of coldStarts) {
      for (const k of ['spawnMs', 'bundleMs', 'modelFetchMs', 'modelLoadMs', 'setupMs', 'warmupMs', 'totalMs']) assert.ok(c[k] >= 0, `${k} = ${c[k]}`);
      assert.ok(c.modelLoadMs > 0 && c.warmupMs > 0, 'the model loads and the warmup input runs');
    }
    assert.ok(first.modelFetchMs > 0, 'the first start downloads the model');
    assert.equal(second.modelFetchMs, 0, 'the second start finds it in the node cache');
    const metrics = await (await fetch(`${p.url}/metrics`, { headers: { authorization: `Bearer ${p.adminKey}` } })).text();
    assert.match(metrics, /embers_cold_start_seconds_count\{function="tiny",phase="model_load"\} 2/);
  });
});

describe('faults', () => {
  it('a replica that cannot start is reported with its phase and error, and callers get a 503', async () => {
    // Both wait for the cold start: the failing replica answers what waits, a binary body too.
    const bytes = p.fetch('/v1/run/broken', { method: 'POST', headers: { 'content-type': 'application/octet-stream' }, body: new Uint8Array([0xff, 0xfe, 0x00, 0x80]) });
    for (const res of [await run('broken', {}), await bytes]) {
      assert.equal(res.status, 503);
      const err = ((await res.json()) as { error: { code: string; message: string } }).error;
      assert.equal(err.code, 'replica_start_failed');
      assert.match(err.message, /setup failed: the license server is unreachable/);
    }
    const { coldStarts } = (await view('broken')) as unknown as { coldStarts: { error?: { phase: string; message: string } }[] };
    assert.deepEqual(coldStarts[0].error, { phase: 'setup', message: 'the license server is unreachable' });
  });

  it('a handler that will not stop after its timeout gets its replica replaced', async () => {
    const { instance: before } = (await (await run('stubborn', { hang: false })).json()) as { instance: string };
    const hung = await run('stubborn', { hang: true });
    assert.equal(hung.status, 504);
    const replaced = await eventually(async () => {
      const r = await run('stubborn', { hang: false });
      const body = (await r.json()) as { instance?: string };
      return r.status === 200 && body.instance !== before ? body.instance : null;
    }, 'a fresh stubborn replica');
    assert.notEqual(replaced, before);
  });

  it('a replica SIGKILLed while holding requests loses none of them', async () => {
    const pending = Array.from({ length: 6 }, (_, i) => run('sleepy', { ms: 800, tag: `kill-${i}` }));
    const victim = await eventually(async () => {
      const v = await view('sleepy');
      const busy = v.replicas.find((r) => r.state === 'ready');
      return busy ? replicasOf('sleepy').find((r) => r.id === busy.id) : null;
    }, 'a ready sleepy replica');
    process.kill(victim.pid!, 'SIGKILL');
    const results = await Promise.all(pending);
    assert.deepEqual(results.map((r) => r.status), Array(6).fill(200));
    const tags = (await Promise.all(results.map((r) => r.json()))).map((b) => (b as { tag: string }).tag).sort();
    assert.deepEqual(tags, Array.from({ length: 6 }, (_, i) => `kill-${i}`).sort());
  });

  it('with two node agents, replicas spread over both; when one dies its work moves to the other', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'embers-agent2-'));
    const second: ChildProcess = spawn(process.execPath, [path.join(ROOT, 'cli/bin.mjs'), 'agent'], {
      env: { ...process.env, ...ENV, EMBERS_REDIS_URL: p.redisUrl, EMBERS_S3_ENDPOINT: p.s3Endpoint!, EMBERS_DATA_DIR: dir, EMBERS_LOG_LEVEL: 'warn' },
      stdio: ['ignore', 'ignore', 'inherit'],
    });
    try {
      await eventually(async () => (await p.redis().smembers('embers:nodes')).length === 2, 'the second agent to register');
      // Placement keeps replicas where they run: had the last test's replicas (maxReplicas of
      // them, all on the first node) outlived its idle timeout, the load would never reach the second.
      await eventually(async () => (await view('sleepy')).replicas.length === 0, 'sleepy to scale to zero first', 30_000);
      // Load that wants more replicas than one node holds: the scheduler places them on both. It
      // is kept up (4 more 2 s requests a second, ~8 in flight) until both nodes have a ready replica.
      const load = Array.from({ length: 8 }, (_, i) => run('sleepy', { ms: 2_000, tag: `two-${i}` }));
      const topUp = setInterval(() => {
        for (let i = 0; i < 4; i++) load.push(run('sleepy', { ms: 2_000, tag: `two-${load.length}` }));
      }, 1_000);
      const nodes = await eventually(async () => {
        const ready = (await view('sleepy')).replicas.filter((r) => r.state === 'ready');
        const distinct = new Set(ready.map((r) => r.node));
        return distinct.size === 2 ? distinct : null;
        // A minute: the second agent builds its runtime and cold-starts a replica on a machine the suite keeps busy.
      }, 'ready replicas on both nodes', 60_000).finally(() => clearInterval(topUp));
      assert.equal(nodes.size, 2);
      second.kill('SIGKILL');
      const more = Array.from({ length: 6 }, (_, i) => run('sleepy', { ms: 300, tag: `after-${i}` }));
      const results = await Promise.all([...load, ...more]);
      assert.deepEqual(results.map((r) => r.status), Array(load.length + more.length).fill(200));
      await eventually(async () => (await p.redis().smembers('embers:nodes')).length === 1, 'the dead agent to drop out');
    } finally {
      second.kill('SIGKILL');
      await rm(dir, { recursive: true, force: true });
    }
  });
});
