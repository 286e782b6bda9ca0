// Faults: a crashing handler or replica never takes down the gateway or another function,
// and every accepted request gets an answer.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { startLocalRedis } from '../../platform/local-redis.ts';
import { eventually, fixture, shipped, startTestPlatform, type TestPlatform } from '../helpers/platform.ts';

let p: TestPlatform;

before(async () => {
  p = await startTestPlatform();
  for (const f of [shipped('echo.ts'), fixture('boom.ts'), fixture('slow.ts')]) await p.deploy(f);
});
after(() => p?.close());

const run = (name: string, body: unknown) => p.fetch(`/v1/run/${name}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
const errorOf = async (res: Response) => ((await res.json()) as { error: { code: string; message: string } }).error;

describe('faults', () => {
  it('a handler that throws answers 500 with its message; the replica keeps serving', async () => {
    const res = await run('boom', { mode: 'throw' });
    assert.equal(res.status, 500);
    const err = await errorOf(res);
    assert.equal(err.code, 'handler_error');
    assert.match(err.message, /kaboom/);
    assert.equal((await run('boom', { mode: 'ok' })).status, 200);
  });

  it('a handler may refuse input with its own 4xx', async () => {
    const res = await run('boom', { mode: 'reject' });
    assert.equal(res.status, 422);
    assert.equal((await errorOf(res)).code, 'refused');
  });

  it('a handler past timeoutMs answers 504 and its signal is aborted', async () => {
    const res = await run('slow', { ms: 10_000 });
    assert.equal(res.status, 504);
    assert.equal((await errorOf(res)).code, 'timeout');
    const quick = await run('slow', { ms: 1 });
    assert.deepEqual(await quick.json(), { slept: 1, aborted: false });
  });

  it('a user-code process that dies running one request answers it, is replaced, and other functions never notice', async () => {
    const crashing = run('boom', { mode: 'exit' });
    // While boom's replica dies and restarts, echo keeps answering.
    for (let i = 0; i < 10; i++) {
      const res = await run('echo', { i });
      assert.equal(res.status, 200);
      assert.deepEqual(await res.json(), { i });
    }
    const res = await crashing;
    assert.equal(res.status, 500);
    const err = await errorOf(res);
    assert.equal(err.code, 'replica_crashed');
    // It ran alone: it is the cause, answered at once rather than run again (decisions/007).
    assert.match(err.message, /exited \(code 7\) while running this request alone/);
    // A fresh replica of boom serves normal requests again.
    const ok = await eventually(async () => {
      const r = await run('boom', { mode: 'ok' });
      return r.status === 200 ? r : null;
    }, 'boom to serve again');
    assert.deepEqual(await ok.json(), { ok: true, mode: 'ok' });
  });

  it('deleting a function stops its replicas and its endpoint answers 404', async () => {
    const del = await p.fetch('/v1/functions/slow', { method: 'DELETE' });
    assert.equal(del.status, 200);
    assert.equal((await run('slow', { ms: 1 })).status, 404);
    await eventually(async () => !p.agent.running().some((r) => r.fn === 'slow'), 'slow replica to stop');
    assert.equal((await p.fetch('/v1/functions/slow', { method: 'DELETE' })).status, 404);
  });
});

describe('Redis outage', () => {
  it('answers 503 fast while Redis is down, and serves again once it is back', async () => {
    const port = Number(new URL(p.redisUrl).port);
    const redis = p.localRedis!;
    await redis.stop();
    const res = await run('echo', { during: 'outage' });
    assert.equal(res.status, 503);
    assert.equal((await errorOf(res)).code, 'unavailable');
    assert.equal((await fetch(`${p.url}/readyz`)).status, 503);
    p.localRedis = await startLocalRedis(redis.dir, { port, persist: true });
    const back = await eventually(
      async () => {
        const r = await p.fetch('/v1/run/echo', { method: 'POST', body: JSON.stringify({ after: 'outage' }), signal: AbortSignal.timeout(5_000) }).catch(() => null);
        return r?.status === 200 ? r : null;
      },
      'echo to serve again after Redis returns',
      60_000,
    );
    assert.deepEqual(await back.json(), { after: 'outage' });
  });
});
