// Admission by Redis's memory: a run that would take Redis past its budget is answered 503
// `redis_full` and queued nowhere; smaller runs still pass. Real Redis, real gateway.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { eventually, shipped, startTestPlatform, type TestPlatform } from '../helpers/platform.ts';
import { liveStream } from '../../core/keys.ts';

let p: TestPlatform;

before(async () => {
  // An empty Redis uses ~1 MB: 4 MB leaves room for small runs, not for a 5 MB body.
  p = await startTestPlatform({ EMBERS_REDIS_MEMORY_LIMIT_MB: '4' });
  await p.deploy(shipped('echo.ts'));
});
after(() => p?.close());

const run = (body: string, headers: Record<string, string> = {}) => p.fetch('/v1/run/echo', { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body });

describe('Redis memory admission', () => {
  it('refuses a run past the budget with 503 and Retry-After, queues nothing, and serves smaller runs', async () => {
    assert.equal((await run('{"small":true}')).status, 200);
    // A lone reply goes out before its entry is deleted (the replica's finishing call): count once that call ran.
    await eventually(async () => (await p.redis().xlen(liveStream('echo'))) === 0, 'the small run deleted from the stream');
    const before = await p.redis().xlen(liveStream('echo'));
    const big = JSON.stringify({ blob: 'x'.repeat(5 * 2 ** 20) });
    for (const headers of [{}, { prefer: 'respond-async' }] as Record<string, string>[]) {
      const res = await run(big, headers);
      assert.equal(res.status, 503);
      assert.equal(res.headers.get('retry-after'), '1');
      const { error } = (await res.json()) as { error: { code: string; message: string } };
      assert.equal(error.code, 'redis_full');
      assert.match(error.message, /past the platform's limit of 4\.0 MB \(EMBERS_REDIS_MEMORY_LIMIT_MB\); nothing was queued/);
    }
    assert.equal(await p.redis().xlen(liveStream('echo')), before, 'nothing was queued');
    const res = await run('{"after":"refusal"}');
    assert.equal(res.status, 200);
    assert.deepEqual(await res.json(), { after: 'refusal' });
    const metrics = await (await p.fetch('/metrics', { headers: { authorization: `Bearer ${p.adminKey}` } })).text();
    assert.match(metrics, /^embers_requests_refused_total\{function="echo",code="redis_full"\} 2$/m);
  });
});
