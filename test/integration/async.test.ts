// Async runs: 202 + job id, status and result, cancel (queued and running), expiry, signed
// webhooks with retries; and live traffic going ahead of a running batch. Replicas here take
// one live request and one batch line at a time, so queued is a state a test can hold.
import assert from 'node:assert/strict';
import { createHmac } from 'node:crypto';
import { createServer, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { Registry } from '../../core/registry.ts';
import { storeFromConfig } from '../../core/s3.ts';
import { eventually, fixture, shipped, startTestPlatform, type TestPlatform } from '../helpers/platform.ts';

let p: TestPlatform;

// Retention of 5 s: long enough for a webhook's retry (after 1 s) to find its job on a slow
// machine, short enough for the expiry test.
before(async () => {
  // The webhook receiver here is on this machine.
  p = await startTestPlatform({ EMBERS_WEBHOOK_ALLOW_PRIVATE: '1', EMBERS_REPLICA_CONCURRENCY: '1', EMBERS_BATCH_CONCURRENCY: '1', EMBERS_JOB_RETENTION_S: '5', EMBERS_SCHEDULER_TICK_MS: '100' });
  await p.deploy(fixture('order.ts'));
  await p.deploy(shipped('echo.ts'));
  await p.deploy(fixture('boom.ts'));
});
after(() => p.close());

const submit = async (fn: string, input: unknown, query = '') => {
  const res = await p.fetch(`/v1/run/${fn}${query}`, { method: 'POST', headers: { prefer: 'respond-async' }, body: JSON.stringify(input) });
  const body = (await res.json()) as { id: string; status: string; url: string };
  return { res, body };
};
const job = async (id: string) => {
  const res = await p.fetch(`/v1/jobs/${id}`);
  return { status: res.status, body: (await res.json()) as Record<string, any> };
};
/** How many requests the order replica has started, this one included. */
const seqNow = async () => ((await (await p.fetch('/v1/run/order', { method: 'POST', body: '{}' })).json()) as { seq: number }).seq;
const finished = (id: string) => eventually(async () => {
  const j = await job(id);
  return ['succeeded', 'failed', 'canceled'].includes(j.body.status) ? j.body : null;
}, `job ${id} to finish`);

describe('async runs', () => {
  test('202 with an id, then the result and timings', async () => {
    const { res, body } = await submit('echo', { hello: 'later' });
    assert.equal(res.status, 202);
    assert.equal(body.status, 'queued');
    assert.match(body.id, /^job_/);
    assert.equal(res.headers.get('location'), body.url);
    const done = await finished(body.id);
    assert.equal(done.status, 'succeeded');
    assert.deepEqual(done.output, { hello: 'later' });
    assert.equal(done.function, 'echo');
    assert.ok(done.startedAt && done.finishedAt && typeof done.timing.queueMs === 'number' && typeof done.timing.inputMs === 'number' && typeof done.timing.outputMs === 'number');
  });

  test('a large input and output (each kept beside its record in Redis) come back whole', async () => {
    const input = { text: 'long '.repeat(8_000) };
    const { body } = await submit('echo', input);
    const done = await finished(body.id);
    assert.equal(done.status, 'succeeded');
    assert.deepEqual(done.output, input);
  });

  test('input is validated before queueing; unknown jobs are 404', async () => {
    const { res } = await submit('order', { ms: 'soon' });
    assert.equal(res.status, 400);
    const bad = await submit('echo', {}, '?webhook=ftp://example.com/x');
    assert.equal(bad.res.status, 400);
    assert.match((bad.body as unknown as { error: { message: string } }).error.message, /http or https/);
    // A webhook on a synchronous run would never be called: refused, not ignored.
    const sync = await p.fetch('/v1/run/echo?webhook=https://example.com/x', { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
    assert.equal(sync.status, 400);
    assert.match(((await sync.json()) as { error: { message: string } }).error.message, /Prefer: respond-async/);
    const missing = await job('job_nope');
    assert.equal(missing.status, 404);
    assert.equal(missing.body.error.code, 'job_not_found');
  });

  test('a handler that throws ends "failed" with its error and status', async () => {
    const { body } = await submit('boom', { mode: 'throw' });
    const done = await finished(body.id);
    assert.equal(done.status, 'failed');
    assert.equal(done.httpStatus, 500);
    assert.equal(done.error.code, 'handler_error');
    assert.match(done.error.message, /kaboom/);
    const refused = await finished((await submit('boom', { mode: 'reject' })).body.id);
    assert.equal(refused.httpStatus, 422);
    assert.equal(refused.error.code, 'refused');
  });

  test('cancel: a queued job never runs; a running one stops through its AbortSignal', async () => {
    const base = await seqNow();
    const running = await submit('order', { ms: 30_000, tag: 'long' });
    await eventually(async () => (await job(running.body.id)).body.status === 'running', 'the long job to start');
    const queued = await submit('order', { ms: 0, tag: 'never' });
    assert.equal((await job(queued.body.id)).body.status, 'queued');

    const c1 = await p.fetch(`/v1/jobs/${queued.body.id}`, { method: 'DELETE' });
    assert.equal(c1.status, 200);
    assert.equal(((await c1.json()) as { status: string }).status, 'canceled');

    const c2 = await p.fetch(`/v1/jobs/${running.body.id}`, { method: 'DELETE' });
    assert.equal(c2.status, 202);
    assert.equal(((await c2.json()) as { cancelRequested: boolean }).cancelRequested, true);
    const done = await finished(running.body.id);
    assert.equal(done.status, 'canceled');
    assert.equal(done.error.code, 'canceled');

    const again = await p.fetch(`/v1/jobs/${running.body.id}`, { method: 'DELETE' });
    assert.equal(again.status, 409);
    // The canceled queued job never ran: the replica started only the long one since base.
    assert.equal(await seqNow(), base + 2);
  });

  test('deleting a function with requests queued is refused; forced, the ones not started are answered 410', async () => {
    // One replica, one request at a time: the first nap runs, the other two wait.
    const naps = [await submit('boom', { mode: 'nap' }), await submit('boom', { mode: 'nap' }), await submit('boom', { mode: 'nap' })];
    await eventually(async () => (await job(naps[0].body.id)).body.status === 'running', 'the first nap to start');
    const refused = await p.fetch('/v1/functions/boom', { method: 'DELETE' });
    assert.equal(refused.status, 409);
    assert.match(((await refused.json()) as { error: { message: string } }).error.message, /queued or running; .*--force/);
    assert.equal((await p.fetch('/v1/functions/boom')).status, 200, 'still there');
    assert.equal((await p.fetch('/v1/functions/boom?force=maybe', { method: 'DELETE' })).status, 400);

    const forced = await p.fetch('/v1/functions/boom?force=true', { method: 'DELETE' });
    assert.equal(forced.status, 200);
    assert.deepEqual(await forced.json(), { deleted: 'boom', dropped: 2 });
    const [ran, ...dropped] = await Promise.all(naps.map((n) => finished(n.body.id)));
    assert.equal(ran.status, 'succeeded', 'the running one finished as it would have');
    for (const d of dropped) {
      assert.equal(d.status, 'failed');
      assert.equal(d.httpStatus, 410);
      assert.equal(d.error.code, 'function_deleted');
    }
    await p.deploy(fixture('boom.ts'));
  });

  test('a run for a function deleted after the gateway looked it up is a 404, and nothing is queued', async () => {
    // Another gateway's delete, before its notice arrives here: this gateway still has echo cached.
    const redis = p.redis();
    assert.equal((await p.fetch('/v1/run/echo', { method: 'POST', body: '{}' })).status, 200);
    await redis.srem('embers:functions', 'echo');
    try {
      const sync = await p.fetch('/v1/run/echo', { method: 'POST', body: '{}' });
      assert.equal(sync.status, 404);
      assert.match(((await sync.json()) as { error: { message: string } }).error.message, /no function named "echo": it was deleted/);
      const queued = await submit('echo', {});
      assert.equal(queued.res.status, 404);
      assert.equal(await redis.xlen('embers:stream:echo'), 0, 'nothing queued for it');
    } finally {
      await redis.sadd('embers:functions', 'echo');
    }
    assert.equal((await p.fetch('/v1/run/echo', { method: 'POST', body: '{}' })).status, 200);
  });

  test('a forced delete that fails part way leaves the function taking no runs, and running it again finishes', async () => {
    const registry = new Registry(p.redis(), storeFromConfig({ EMBERS_S3_ENDPOINT: p.s3Endpoint, EMBERS_S3_BUCKET: 'embers' }));
    await assert.rejects(registry.remove('boom', { beforeDelete: async () => Promise.reject(new Error('Redis went away')) }), /Redis went away/);
    assert.equal(await p.redis().sismember('embers:functions', 'boom'), 0, 'out of the index');
    assert.equal((await p.fetch('/v1/functions/boom')).status, 200, 'still recorded, so the delete can be run again');
    assert.equal((await p.fetch('/v1/run/boom', { method: 'POST', body: JSON.stringify({ mode: 'ok' }) })).status, 404);
    // Deploying it again, unchanged, brings it back.
    await p.deploy(fixture('boom.ts'));
    assert.equal((await p.fetch('/v1/run/boom', { method: 'POST', body: JSON.stringify({ mode: 'ok' }) })).status, 200);
    // A deploy while a delete answers what was queued wins: the delete leaves its records.
    assert.equal(await registry.remove('boom', { beforeDelete: async () => void (await p.deploy(fixture('boom.ts'))) }), 'redeployed');
    assert.equal((await p.fetch('/v1/run/boom', { method: 'POST', body: JSON.stringify({ mode: 'ok' }) })).status, 200);
    // Cut short again, then run again over HTTP: it finishes.
    await assert.rejects(registry.remove('boom', { beforeDelete: async () => Promise.reject(new Error('Redis went away')) }));
    const again = await p.fetch('/v1/functions/boom?force=true', { method: 'DELETE' });
    assert.equal(again.status, 200);
    assert.deepEqual(await again.json(), { deleted: 'boom', dropped: 0 });
    assert.equal((await p.fetch('/v1/functions/boom')).status, 404);
    await p.deploy(fixture('boom.ts'));
  });

  test('results expire after EMBERS_JOB_RETENTION_S and then say so', async () => {
    const { body } = await submit('echo', { short: 'lived' });
    await finished(body.id);
    const gone = await eventually(async () => {
      const j = await job(body.id);
      return j.status === 404 ? j.body : null;
    }, 'the result to expire', 20_000);
    assert.equal(gone.error.code, 'job_expired');
    assert.match(gone.error.message, /expired/);
  });

  test('webhooks: signed, retried after a failure, verifiable with the tenant secret', async () => {
    const deliveries: { headers: IncomingMessage['headers']; body: string; answered: number }[] = [];
    const server = createServer((req, res) => {
      let body = '';
      req.on('data', (c) => (body += c));
      req.on('end', () => {
        const answered = deliveries.length === 0 ? 500 : 200; // the first attempt fails
        deliveries.push({ headers: req.headers, body, answered });
        res.writeHead(answered).end();
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    try {
      const hook = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`;
      const { body } = await submit('echo', { notify: true }, `?webhook=${encodeURIComponent(hook)}`);
      await eventually(async () => deliveries.length >= 2, 'a retried webhook delivery', 20_000);
      const { secret } = (await (await p.fetch('/v1/webhooks/secret')).json()) as { secret: string };
      const last = deliveries[1];
      assert.equal(last.headers['embers-webhook-id'], body.id);
      const [, t, v1] = /^t=(\d+),v1=([0-9a-f]{64})$/.exec(String(last.headers['embers-signature']))!;
      assert.equal(createHmac('sha256', secret).update(`${t}.${last.body}`).digest('hex'), v1);
      const payload = JSON.parse(last.body) as { id: string; status: string; output: unknown };
      assert.equal(payload.id, body.id);
      assert.equal(payload.status, 'succeeded');
      assert.deepEqual(payload.output, { notify: true });
      // A forged body does not verify.
      assert.notEqual(createHmac('sha256', secret).update(`${t}.${last.body.replace('true', 'false')}`).digest('hex'), v1);
    } finally {
      server.close();
    }
  });
});

describe('priorities', () => {
  test('live requests go ahead of batch lines queued before them', async () => {
    // The replica numbers what it starts: take the count before the batch.
    const base = await seqNow();
    const lines = Array.from({ length: 30 }, (_, i) => JSON.stringify({ custom_id: `b${i}`, input: { ms: 100, tag: `b${i}` } })).join('\n');
    const created = await p.fetch('/v1/batches?function=order', { method: 'POST', body: lines });
    assert.equal(created.status, 201);
    const batch = (await created.json()) as { id: string };
    const redis = p.redis();
    const key = `embers:batch:${batch.id}`;
    // Every line is queued (30 < EMBERS_BATCH_MAX_OUTSTANDING) and the replica is working through them.
    await eventually(async () => Number(await redis.hget(key, 'fed')) === 30 && Number(await redis.hget(key, 'completed')) >= 1, 'the batch to be queued and running');
    const live = await p.fetch('/v1/run/order', { method: 'POST', body: JSON.stringify({ ms: 0, tag: 'live' }) });
    // Read the moment the live request returned: batch lines done by then, and still waiting.
    const doneAfter = Number(await redis.hget(key, 'completed'));
    assert.equal(live.status, 200);
    const { seq } = (await live.json()) as { seq: number };
    assert.ok(30 - doneAfter >= 5, `the batch still had lines waiting (${30 - doneAfter})`);
    // In FIFO order the live request would have waited behind every queued line; it ran next.
    // At most: the lines already done, the one running when it arrived, and itself.
    const position = seq - base;
    assert.ok(position <= doneAfter + 2, `live request started as #${position} after the batch began, with ${doneAfter} batch lines done`);
  });
});
