// Invoices and budgets on a real platform: each request charged at the prices its version ran
// at, invoices that agree with GET /v1/usage, a budget enforced at the gateway with the month's
// end as Retry-After, and its alerts delivered once, signed.
import assert from 'node:assert/strict';
import { createHmac } from 'node:crypto';
import { createServer, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { EmbersClient } from '../../cli/client.ts';
import { deployFile } from '../../cli/deploy.ts';
import type { Invoice } from '../../core/invoice.ts';
import { keys } from '../../core/keys.ts';
import { monthOf, secondsToMonthEnd } from '../../core/months.ts';
import { eventually, fixture, startTestPlatform, tenantWithKey, type TestPlatform } from '../helpers/platform.ts';

let p: TestPlatform;

before(async () => {
  p = await startTestPlatform({ EMBERS_WEBHOOK_ALLOW_PRIVATE: '1', EMBERS_SCHEDULER_TICK_MS: '100' });
});
after(async () => {
  await p?.close();
});

const as = (key: string) => (route: string, init: RequestInit = {}) => p.fetch(route, { ...init, headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', ...init.headers } });
const deployAs = (key: string, file: string) => deployFile(new EmbersClient({ url: p.url, apiKey: key }), fixture(file));

async function json<T = Record<string, unknown>>(res: Response | Promise<Response>, status: number): Promise<T> {
  const r = await res;
  const body = await r.text();
  assert.equal(r.status, status, body);
  return JSON.parse(body) as T;
}

const thisMonth = () => monthOf(Date.now()).replace(/(\d{4})(\d\d)/, '$1-$2');

/** Runs `priced` once; the version that answered. */
async function run(f: ReturnType<typeof as>): Promise<string> {
  const r = await f('/v1/run/priced', { method: 'POST', body: '{}' });
  assert.equal(r.status, 200, await r.clone().text());
  return r.headers.get('embers-version')!;
}

describe('invoices', () => {
  it('charge each version at its own prices across a mid-month price change, and agree with GET /v1/usage', async () => {
    const { id: tenant, key } = await tenantWithKey(p, 'invoiced');
    const asT = as(key);
    await deployAs(key, 'priced-a.ts');
    const ran = new Map<string, number>();
    const count = (v: string) => ran.set(v, (ran.get(v) ?? 0) + 1);
    for (let i = 0; i < 3; i++) count(await run(asT));
    await deployAs(key, 'priced-b.ts');
    // A replica of v1 may still answer while v2's starts: each request is charged where it ran.
    while ((ran.get('v2') ?? 0) < 2) count(await run(asT));
    const total = [...ran.values()].reduce((a, n) => a + n, 0);
    const invoice = await eventually(async () => {
      const inv = await json<Invoice>(asT('/v1/usage/invoice'), 200);
      return inv.total.requests === total ? inv : null;
    }, 'every request on the invoice');
    assert.equal(invoice.tenant, tenant);
    assert.equal(invoice.month, thisMonth());
    assert.deepEqual(invoice.lines.map((l) => [l.function, l.version, l.requests]), [...ran].sort().map(([v, n]) => ['priced', v, n]));
    const [v1, v2] = invoice.lines;
    assert.equal(v1.cost, v1.requests * 0.25, 'v1: 0.25 a request');
    assert.ok(Math.abs(v2.cost - (v2.requests * 0.5 + v2.computeSeconds)) < 2e-6, `v2: 0.5 a request and 1 a compute-second: ${JSON.stringify(v2)}`);
    assert.ok(Math.abs(invoice.total.cost - (v1.cost + v2.cost)) < 2e-6);

    // The same month through GET /v1/usage: the same requests and cost, as charged.
    const rows = (await json<{ data: { requests: number; cost: number }[] }>(asT(`/v1/usage?from=${invoice.from}&to=${invoice.to}`), 200)).data;
    assert.equal(rows.reduce((a, r) => a + r.requests, 0), invoice.total.requests);
    assert.ok(Math.abs(rows.reduce((a, r) => a + r.cost, 0) - invoice.total.cost) < 2e-6);

    // The admin names the tenant; a tenant reads only its own; months are YYYY-MM, future ones empty.
    const admin = as(p.adminKey);
    assert.deepEqual((await json<Invoice>(admin(`/v1/usage/invoice?tenant=${tenant}&month=${thisMonth()}`), 200)).total, invoice.total);
    await json(admin('/v1/usage/invoice'), 400);
    await json(asT('/v1/usage/invoice?tenant=default'), 403);
    for (const bad of ['2026-13', 'november', '2026-1']) assert.equal((await json<{ error: { code: string } }>(asT(`/v1/usage/invoice?month=${bad}`), 400)).error.code, 'invalid_month');
    const future = await json<Invoice>(asT('/v1/usage/invoice?month=2999-01'), 200);
    assert.deepEqual([future.lines, future.total.requests, future.from], [[], 0, '2999-01-01T00:00:00.000Z']);
  });
});

describe('budgets', () => {
  it('refuse a tenant at its budget until raised, leave others alone, and alert at 80 % and 100 % once, signed', async () => {
    const deliveries: { headers: IncomingMessage['headers']; body: string }[] = [];
    const server = createServer((req, res) => {
      let body = '';
      req.on('data', (c) => (body += c));
      req.on('end', () => {
        deliveries.push({ headers: req.headers, body });
        res.writeHead(200).end();
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    try {
      const hook = `http://127.0.0.1:${(server.address() as AddressInfo).port}/budget`;
      const { id: tenant, key } = await tenantWithKey(p, 'budgeted');
      const { key: otherKey } = await tenantWithKey(p, 'unbudgeted');
      const [asT, asO, admin] = [as(key), as(otherKey), as(p.adminKey)];
      await Promise.all([deployAs(key, 'priced-a.ts'), deployAs(otherKey, 'priced-a.ts')]);
      // 0.25 a request: four reach it.
      const set = await json<{ monthlySpend: number; monthToDate: { cost: number } }>(admin(`/v1/tenants/${tenant}/budget`, { method: 'PUT', body: JSON.stringify({ monthlySpend: 1, webhook: hook }) }), 200);
      assert.deepEqual([set.monthlySpend, set.monthToDate.cost], [1, 0]);
      await json(admin(`/v1/tenants/${tenant}/budget`, { method: 'PUT', body: JSON.stringify({ webhook: hook }) }), 400);
      await json(asT(`/v1/tenants/${tenant}/budget`), 403);

      let ok = 0;
      let refused: { status: number; retryAfter: string | null; body: string } | undefined;
      // The gateway reads the month's totals at most once a second: a few more may pass (the overshoot).
      for (let i = 0; i < 60 && !refused; i++) {
        const r = await asT('/v1/run/priced', { method: 'POST', body: '{}' });
        const body = await r.text();
        if (r.status === 200) ok++;
        else refused = { status: r.status, retryAfter: r.headers.get('retry-after'), body };
        if (ok >= 4) await new Promise((res) => setTimeout(res, 100));
      }
      assert.ok(refused, 'refused once the budget was reached');
      assert.ok(ok >= 4, `${ok} requests ran before the refusal`);
      assert.equal(refused.status, 429, refused.body);
      const { error } = JSON.parse(refused.body) as { error: { code: string; message: string } };
      assert.equal(error.code, 'budget_exhausted');
      assert.match(error.message, /spend budget of 1 \(used [\d.]+\) for \d{4}-\d\d; runs resume at/);
      const expected = secondsToMonthEnd(Date.now());
      assert.ok(Math.abs(Number(refused.retryAfter) - expected) <= 5, `Retry-After ${refused.retryAfter}, month ends in ${expected} s`);
      await json(asT('/v1/run/priced', { method: 'POST', body: '{}', headers: { prefer: 'respond-async' } }), 429);
      await json(asT('/v1/batches?function=priced', { method: 'POST', body: '{"custom_id":"a","input":{}}\n', headers: { 'content-type': 'application/x-ndjson' } }), 429);
      assert.equal(await run(asO), 'v1', 'another tenant runs on');

      // Raised: runs go through again within the gateway's second.
      await json(admin(`/v1/tenants/${tenant}/budget`, { method: 'PUT', body: JSON.stringify({ monthlySpend: 100, webhook: hook }) }), 200);
      await eventually(async () => (await asT('/v1/run/priced', { method: 'POST', body: '{}' })).status === 200, 'a run under the raised budget', 5_000);

      // 80 % and 100 % of the first amount, once each, signed with the tenant's webhook secret.
      await eventually(async () => deliveries.length >= 2, 'both budget alerts');
      // Passes of the leading scheduler (every 100 ms here) judge the budget again: none sends them again.
      await new Promise((r) => setTimeout(r, 1_000));
      const alerts = deliveries.map((d) => JSON.parse(d.body) as { type: string; tenant: string; budget: string; threshold: number; limit: number; used: number });
      assert.deepEqual(alerts.map((a) => `${a.type} ${a.tenant} ${a.budget} ${a.threshold} ${a.limit}`).sort(), [`budget.threshold ${tenant} monthlySpend 0.8 1`, `budget.threshold ${tenant} monthlySpend 1 1`]);
      const { secret } = await json<{ secret: string }>(asT('/v1/webhooks/secret'), 200);
      for (const d of deliveries) {
        assert.equal(d.headers['embers-event'], 'budget.threshold');
        const [, t, v1] = /^t=(\d+),v1=([0-9a-f]{64})$/.exec(String(d.headers['embers-signature']))!;
        assert.equal(createHmac('sha256', secret).update(`${t}.${d.body}`).digest('hex'), v1);
      }
      const shown = await json<{ monthToDate: { cost: number } }>(admin(`/v1/tenants/${tenant}/budget`), 200);
      assert.ok(shown.monthToDate.cost >= 1);
      await json(admin(`/v1/tenants/${tenant}/budget`, { method: 'DELETE' }), 200);
      await json(admin(`/v1/tenants/${tenant}/budget`), 404);
    } finally {
      server.close();
    }
  });

  it('pause a batch whose tenant reaches its budget mid-way, taking its queued lines back, and resume it when raised', async () => {
    const { id: tenant, key } = await tenantWithKey(p, 'batched');
    const [asT, admin] = [as(key), as(p.adminKey)];
    await deployAs(key, 'priced-slow.ts');
    await json(admin(`/v1/tenants/${tenant}/budget`, { method: 'PUT', body: JSON.stringify({ monthlySpend: 1 }) }), 200);
    // Every line is queued at once (the window is 256); each takes 500 ms, 8 at a time.
    const total = 120;
    const lines = Array.from({ length: total }, (_, i) => JSON.stringify({ custom_id: `l${i}`, input: { i } })).join('\n');
    const { id } = await json<{ id: string }>(asT('/v1/batches?function=priced-slow', { method: 'POST', body: lines, headers: { 'content-type': 'application/x-ndjson' } }), 201);
    type Batch = { status: string; request_counts: { completed: number; failed: number }; paused?: { code: string; message: string; since: string } };
    const view = () => json<Batch>(asT(`/v1/batches/${id}`), 200);
    // 0.25 a line: the fourth reaches the budget; the feeder looks every second.
    const paused = await eventually(async () => ((await view()).paused ? view() : null), 'the batch to pause', 30_000);
    assert.equal(paused.status, 'in_progress');
    assert.equal(paused.paused!.code, 'budget_exhausted');
    assert.match(paused.paused!.message, /spend budget of 1 .*runs resume at/);
    // The lines a replica held at the pause finish; the rest wait out of the queue, and nothing moves.
    const doneNow = async () => {
      const { request_counts: c } = await view();
      return c.completed + c.failed;
    };
    await new Promise((r) => setTimeout(r, 1_500));
    const done = await doneNow();
    assert.ok(done >= 4 && done <= total / 2, `${done} of ${total} lines ran before the pause held`);
    assert.ok((await p.redis().hlen(keys.batchHeld(id))) > 0, 'queued lines taken back');
    await new Promise((r) => setTimeout(r, 3_000));
    assert.equal(await doneNow(), done, 'no line ran while paused');
    assert.equal((await view()).status, 'in_progress');

    await json(admin(`/v1/tenants/${tenant}/budget`, { method: 'PUT', body: JSON.stringify({ monthlySpend: 100 }) }), 200);
    const finished = await eventually(async () => {
      const b = await view();
      return b.status === 'completed' ? b : null;
    }, 'the batch to resume and complete', 60_000);
    assert.deepEqual(finished.request_counts, { total, completed: total, failed: 0 });
    assert.equal(await p.redis().hexists(keys.batch(id), 'paused'), 0, 'the pause is lifted, not only hidden');
    assert.equal(await p.redis().exists(keys.batchHeld(id)), 0);
    // Each line ran once: the invoice counts exactly the batch's lines (a line's record may follow its outcome by a moment).
    const billed = async () => (await json<Invoice>(asT('/v1/usage/invoice'), 200)).lines.find((l) => l.function === 'priced-slow')?.requests ?? 0;
    await eventually(async () => (await billed()) >= total, 'every line billed');
    assert.equal(await billed(), total);
  });
});
