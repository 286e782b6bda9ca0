// A node that cannot sandbox user code (here: EMBERS_SANDBOX=off) says so in /readyz and runs
// only the default tenant's functions; another tenant's requests are answered 503, not run.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { EmbersClient } from '../../cli/client.ts';
import { deployFile } from '../../cli/deploy.ts';
import { shipped, startTestPlatform, type TestPlatform } from '../helpers/platform.ts';

let p: TestPlatform;

before(async () => {
  p = await startTestPlatform({ EMBERS_SANDBOX: 'off' });
  await p.deploy(shipped('echo.ts'));
});
after(() => p?.close());

const post = (key: string, route: string, body: unknown) => p.fetch(route, { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body: JSON.stringify(body) });

describe('a node that cannot sandbox', () => {
  it('says what is missing in /readyz', async () => {
    const ready = (await (await fetch(`${p.url}/readyz`)).json()) as { ok: boolean; sandbox: { ok: boolean; nodes: { isolates: boolean; runs: string; missing: string[] }[] } };
    assert.equal(ready.ok, true);
    assert.equal(ready.sandbox.ok, false);
    assert.deepEqual([ready.sandbox.nodes[0].isolates, ready.sandbox.nodes[0].runs], [false, 'default tenant only']);
    assert.match(ready.sandbox.nodes[0].missing.join(' '), /EMBERS_SANDBOX=off/);
  });

  it("runs the default tenant's functions, and answers another tenant's 503 without running them", async () => {
    assert.equal((await post(p.apiKey, '/v1/run/echo', { who: 'default' })).status, 200);
    const tenant = ((await (await post(p.adminKey, '/v1/tenants', { name: 'acme' })).json()) as { id: string }).id;
    const key = ((await (await post(p.adminKey, `/v1/tenants/${tenant}/keys`, {})).json()) as { key: string }).key;
    await deployFile(new EmbersClient({ url: p.url, apiKey: key }), shipped('echo.ts'));
    const res = await post(key, '/v1/run/echo', { who: 'acme' });
    assert.equal(res.status, 503);
    const err = ((await res.json()) as { error: { code: string; message: string } }).error;
    assert.equal(err.code, 'replica_start_failed');
    assert.match(err.message, /cannot sandbox user code.*EMBERS_ALLOW_UNSANDBOXED=1/);
  });
});
