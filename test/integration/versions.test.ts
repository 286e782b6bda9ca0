// Versions and traffic on the real platform: deploy --no-activate, rollback, a split between two
// versions (each on replicas of its own), sticky callers, automatic rollouts that promote and roll
// back, and tenants kept apart. Rollout steps are shortened by config.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { EmbersClient } from '../../cli/client.ts';
import { deployFile } from '../../cli/deploy.ts';
import { keys } from '../../core/keys.ts';
import { trafficBucket } from '../../core/traffic.ts';
import { qualifiedName } from '../../core/names.ts';
import { eventually, fixture, startTestPlatform, tenantWithKey, type TestPlatform } from '../helpers/platform.ts';

let p: TestPlatform;

before(async () => {
  p = await startTestPlatform({
    EMBERS_SCHEDULER_TICK_MS: '200',
    EMBERS_SCALE_STABLE_WINDOW_S: '2',
    EMBERS_ROLLOUT_STEP_S: '1',
    EMBERS_ROLLOUT_MIN_REQUESTS: '20',
    // The p99 rule is the unit tests' (rollout-judge.test.ts): on a shared machine a stray pause
    // among a few dozen requests is a p99, and these tests judge on error rates alone.
    EMBERS_ROLLOUT_MAX_P99_RATIO: '1000',
  });
});
after(() => p?.close());

interface Versions {
  active: string;
  previous: string | null;
  versions: { version: string; active: boolean; traffic: number }[];
  split: { version: string; percent: number; auto: { step: number } | null } | null;
  rollout: { version: string; from: string; outcome: string; reason: string } | null;
}

const ANSWERS: Record<string, string> = { a: 'v1', b: 'v2' };

/** A call with `key` (the platform's own by default): status and JSON body. */
async function call<T = Record<string, unknown>>(method: string, route: string, body?: unknown, key = p.apiKey): Promise<{ status: number; body: T }> {
  const res = await p.fetch(route, { method, headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, ...(body === undefined ? {} : { body: JSON.stringify(body) }) });
  return { status: res.status, body: (await res.json()) as T };
}

/** Runs canary once: the version that answered (its header), checked against what it answered. */
async function runCanary(key = p.apiKey, headers: Record<string, string> = {}): Promise<{ status: number; version: string | null }> {
  const res = await p.fetch('/v1/run/canary', { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', ...headers }, body: '{}' });
  const body = (await res.json()) as { version?: string };
  const version = res.headers.get('embers-version');
  if (res.status === 200) assert.equal(ANSWERS[body.version!], version, `the header names the version that answered: ${JSON.stringify(body)}`);
  return { status: res.status, version };
}

/** `n` runs, `width` at a time: how many each version answered. */
async function runMany(n: number, width = 10, key = p.apiKey): Promise<Record<string, number>> {
  const counts: Record<string, number> = {};
  for (let done = 0; done < n; done += width) {
    for (const r of await Promise.all(Array.from({ length: Math.min(width, n - done) }, () => runCanary(key)))) {
      assert.equal(r.status, 200);
      counts[r.version!] = (counts[r.version!] ?? 0) + 1;
    }
  }
  return counts;
}

/** Waits until canary's own replicas run only `version`, then checks that it answers every request. */
async function settled(version: string, tenant?: string, key = p.apiKey): Promise<void> {
  const fn = tenant ? qualifiedName(tenant, 'canary') : 'canary';
  await eventually(async () => {
    const own = p.agent.running().filter((r) => r.fn === fn);
    return own.length > 0 && own.every((r) => r.version === version);
  }, `canary's replicas to run ${version}`);
  assert.deepEqual(await runMany(10, 10, key), { [version]: 10 });
}

describe('versions, rollback and a split', () => {
  it('deploy --no-activate stores a version and leaves traffic alone', async () => {
    assert.equal((await p.deploy(fixture('canary-a.ts'))).version, 'v1');
    const stored = await deployFile(p.client, fixture('canary-b.ts'), undefined, { activate: false });
    assert.deepEqual([stored.version, stored.activated, stored.unchanged], ['v2', false, false]);
    assert.deepEqual(await runMany(10), { v1: 10 });
    const again = await deployFile(p.client, fixture('canary-b.ts'), undefined, { activate: false });
    assert.deepEqual([again.version, again.unchanged], ['v2', true]);
    const { body } = await call<Versions>('GET', '/v1/functions/canary/versions');
    assert.deepEqual(body.versions.map((v) => [v.version, v.active, v.traffic]), [['v1', true, 100], ['v2', false, 0]]);
  });

  it('refuses what it cannot do with a message that says what to send', async () => {
    const refused = async (method: string, route: string, body: unknown, status: number, code: string, message: RegExp) => {
      const r = await call<{ error: { code: string; message: string } }>(method, route, body);
      assert.equal(r.status, status, JSON.stringify(r.body));
      assert.equal(r.body.error.code, code);
      assert.match(r.body.error.message, message);
    };
    await refused('PUT', '/v1/functions/canary/traffic', { traffic: { v1: 50, v2: 40 } }, 400, 'split_not_100', /add up to 90 %/);
    await refused('PUT', '/v1/functions/canary/traffic', { traffic: { v1: 10, v2: 10, v3: 80 } }, 400, 'too_many_versions', /at most two versions/);
    await refused('PUT', '/v1/functions/canary/traffic', { traffic: { v9: 10, v1: 90 } }, 404, 'version_not_found', /no version "v9"; it has v1, v2/);
    await refused('POST', '/v1/functions/canary/rollback', { version: 'v9' }, 404, 'version_not_found', /it has v1, v2/);
    await refused('POST', '/v1/functions/canary/rollback', {}, 409, 'no_previous_version', /embers rollback canary <version>/);
    await refused('POST', '/v1/functions/canary/rollouts', { version: 'v1' }, 409, 'already_active', /--no-activate/);
    // A version key is no name anyone can call or manage.
    assert.equal((await call('GET', '/v1/functions/canary@v2/versions')).status, 404);
    assert.equal((await p.fetch('/v1/run/canary@v2', { method: 'POST', body: '{}' })).status, 404);
  });

  it('splits 30/70 over 200 requests, each version on replicas of its own with its own metrics', async () => {
    const { status, body } = await call<Versions>('PUT', '/v1/functions/canary/traffic', { traffic: { v2: 30, v1: 70 } });
    assert.equal(status, 200);
    assert.deepEqual(body.versions.map((v) => v.traffic), [70, 30]);
    const counts = await runMany(200);
    // Binomial(200, 0.3): mean 60, standard deviation 6.5; 20 to 100 is over six of them each way.
    assert.equal((counts.v1 ?? 0) + (counts.v2 ?? 0), 200);
    assert.ok(counts.v2 >= 20 && counts.v2 <= 100, JSON.stringify(counts));
    const running = p.agent.running().map((r) => `${r.fn} ${r.version}`);
    assert.ok(running.includes('canary v1') && running.includes('canary@v2 v2'), running.join(', '));
    assert.ok((await p.redis().llen(keys.coldStarts('canary@v2'))) >= 1, 'its own cold starts');
    assert.ok((await p.redis().keys('embers:series:canary@v2:*')).length >= 1, 'its own per-minute series');
  });

  it('a caller that sends Embers-Version-Key keeps its version', async () => {
    for (let i = 0; i < 12; i++) {
      const expected = trafficBucket('canary', `caller-${i}`) < 30 ? 'v2' : 'v1';
      for (let j = 0; j < 3; j++) assert.equal((await runCanary(p.apiKey, { 'embers-version-key': `caller-${i}` })).version, expected, `caller-${i}`);
    }
  });

  it('rollback ends a split at once, and otherwise goes back to the previous version', async () => {
    let r = await call<Versions>('POST', '/v1/functions/canary/rollback', {});
    assert.deepEqual([r.body.active, r.body.split], ['v1', null]);
    assert.deepEqual(await runMany(20), { v1: 20 });
    r = await call<Versions>('PUT', '/v1/functions/canary/traffic', { traffic: { v2: 100 } });
    assert.deepEqual([r.body.active, r.body.previous], ['v2', 'v1']);
    // As on a deploy, requests the old version's replicas took before they were replaced finish there.
    await settled('v2');
    r = await call<Versions>('POST', '/v1/functions/canary/rollback');
    assert.deepEqual([r.body.active, r.body.previous], ['v1', 'v2']);
    await settled('v1');
  });
});

describe('automatic rollouts, per tenant', () => {
  let acme: { id: string; key: string };
  before(async () => {
    acme = await tenantWithKey(p, 'acme');
    const client = new EmbersClient({ url: p.url, apiKey: acme.key });
    await deployFile(client, fixture('canary-a.ts'));
    await deployFile(client, fixture('canary-b.ts'), undefined, { activate: false });
  });

  /** Runs acme's canary in rounds until `done` says so; every answer is 200 or, with `failing`, 500. */
  async function driveUntil(done: (v: Versions) => boolean, failing = false): Promise<{ seen: Set<number>; last: Versions }> {
    const seen = new Set<number>();
    const last = await eventually(async () => {
      const rounds = await Promise.all(Array.from({ length: 10 }, () => runCanary(acme.key)));
      for (const r of rounds) assert.ok(r.status === 200 || (failing && r.status === 500), `status ${r.status}`);
      const v = (await call<Versions>('GET', '/v1/functions/canary/versions', undefined, acme.key)).body;
      if (v.split) seen.add(v.split.percent);
      return done(v) ? v : null;
    }, 'the rollout to end', 40_000);
    return { seen, last };
  }

  it("another tenant cannot see or move acme's versions", async () => {
    const other = await tenantWithKey(p, 'other');
    for (const [method, route, body] of [['GET', '/v1/functions/canary/versions'], ['POST', '/v1/functions/canary/rollback', {}], ['PUT', '/v1/functions/canary/traffic', { traffic: { v2: 100 } }], ['POST', '/v1/functions/canary/rollouts', { version: 'v2' }]] as const) {
      const r = await call<{ error: { code: string } }>(method, route, body, other.key);
      assert.deepEqual([r.status, r.body.error.code], [404, 'function_not_found'], `${method} ${route}`);
    }
    // The default tenant's canary has versions of its own.
    assert.equal((await call<Versions>('GET', '/v1/functions/canary/versions', undefined, acme.key)).body.active, 'v1');
  });

  it('promotes a version that does as well, 10 → 50 → 100 %', async () => {
    const started = await call<Versions>('POST', '/v1/functions/canary/rollouts', { version: 'v2' }, acme.key);
    assert.equal(started.status, 201);
    assert.deepEqual([started.body.split?.version, started.body.split?.percent], ['v2', 0]);
    const { seen, last } = await driveUntil((v) => v.rollout?.outcome === 'promoted');
    assert.deepEqual([last.active, last.previous, last.split], ['v2', 'v1', null]);
    assert.match(last.rollout!.reason, /v2 stayed within bounds of v1/);
    assert.ok(seen.has(10) || seen.has(50), `saw the shares ${[...seen].join(', ')}`);
    // As on a deploy, requests v1's replicas took before they were replaced finish there.
    await settled('v2', acme.id, acme.key);
  });

  it('rolls back a failing version at once, and says why', async () => {
    const stored = await deployFile(new EmbersClient({ url: p.url, apiKey: acme.key }), fixture('canary-bad.ts'), undefined, { activate: false });
    assert.equal(stored.version, 'v3');
    assert.equal((await call('POST', '/v1/functions/canary/rollouts', { version: 'v3' }, acme.key)).status, 201);
    const { last } = await driveUntil((v) => v.rollout?.outcome === 'rolled_back', true);
    assert.deepEqual([last.active, last.split, last.rollout!.version], ['v2', null, 'v3']);
    assert.match(last.rollout!.reason, /v3 answered \d+(\.\d)? % of \d+ requests with a server error/);
    const shown = await call<{ rollout: Versions['rollout'] }>('GET', '/v1/functions/canary', undefined, acme.key);
    assert.equal(shown.body.rollout?.reason, last.rollout!.reason);
    assert.deepEqual(await runMany(10, 10, acme.key), { v2: 10 });
  });
});
