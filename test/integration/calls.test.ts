// Composition (ctx.call) on the real platform: a router calling two functions, a caller's
// deadline reaching its callee, a caller who leaves stopping it, a chain of calls bounded in
// depth (and a function calling itself on one replica that takes one request at a time), another
// tenant's function answered as missing, the key's limits applied to calls, a streaming callee's
// chunks, and the usage records, Server-Timing and tail lines that link a call to its caller.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { readEvents, type ServerEvent } from '../../cli/sse.ts';
import { EmbersClient } from '../../cli/client.ts';
import { deployFile } from '../../cli/deploy.ts';
import { keys, usageKeys } from '../../core/keys.ts';
import type { TailLine } from '../../core/tail.ts';
import type { UsageRecord } from '../../core/usage.ts';
import { eventually, fixture, startTestPlatform, tenantWithKey, type TestPlatform } from '../helpers/platform.ts';

let p: TestPlatform;
/** A second tenant, made by the cross-tenant test. */
let b: { id: string; key: string };

before(async () => {
  // One request at a time per replica: a function calling itself needs the slots its waiting requests lend.
  p = await startTestPlatform({ EMBERS_REPLICA_CONCURRENCY: '1', EMBERS_SCHEDULER_TICK_MS: '100', EMBERS_MAX_CALL_DEPTH: '4' });
  for (const f of ['caller.ts', 'upper.ts', 'words.ts', 'chain.ts', 'holder.ts', 'counter.ts', 'call-forger.ts']) await p.deploy(fixture(f));
});
after(() => p.close());

const run = (fn: string, input: unknown, o: { key?: string; signal?: AbortSignal } = {}) =>
  p.fetch(`/v1/run/${fn}`, { method: 'POST', headers: { 'content-type': 'application/json', ...(o.key ? { authorization: `Bearer ${o.key}` } : {}) }, body: JSON.stringify(input), signal: o.signal });

const json = async (res: Response) => ({ status: res.status, body: (await res.json()) as Record<string, unknown>, headers: res.headers });

async function usage(fn: string): Promise<UsageRecord[]> {
  const entries = await p.redis().xrange(usageKeys.records, '-', '+');
  return entries.map(([, f]) => JSON.parse(f[1]) as UsageRecord).filter((r) => r.fn === fn);
}

const holderEnds = async (tag: string) => (await json(await run('holder', { report: true, tag }))).body as unknown as { how: string; afterMs: number }[];
/** How the holder's first run tagged `tag` ended, once it has. */
const holderEnded = (tag: string) =>
  eventually(async () => (await holderEnds(tag))[0], `the holder's run "${tag}" to end`);

describe('ctx.call', () => {
  test('a router calls two functions; usage records link each call to its caller, and Server-Timing shows the time in calls', async () => {
    const upper = await json(await run('caller', { mode: 'route', op: 'upper', text: 'hello embers' }));
    assert.equal(upper.status, 200, JSON.stringify(upper.body));
    assert.deepEqual(upper.body, { by: 'upper', result: { text: 'HELLO EMBERS' } });
    const words = await json(await run('caller', { mode: 'route', op: 'words', text: 'one two three' }));
    assert.deepEqual(words.body, { by: 'words', result: { words: 3 } });
    assert.match(words.headers.get('server-timing')!, /call;dur=\d/);
    const rid = words.headers.get('x-request-id')!;
    const callee = await eventually(async () => (await usage('words')).find((r) => r.parent === rid), 'the callee\'s usage record');
    assert.equal(callee.status, 200);
    assert.equal(callee.kind, 'sync');
    assert.equal(callee.tenant, 'default');
    const parent = await eventually(async () => (await usage('caller')).find((r) => r.id && r.parent === undefined && r.callMs !== undefined && r.callMs > 0), 'the caller\'s usage record with its time in calls');
    assert.ok(parent.callMs! <= parent.computeMs, `${parent.callMs} ≤ ${parent.computeMs}`);
    // Who called whom, for the console.
    assert.ok((await p.redis().zscore(keys.callsOut('caller'), 'words')) !== null);
    assert.ok((await p.redis().zscore(keys.callsIn('words'), 'caller')) !== null);
  });

  test('a callee\'s error reaches its caller as a HandlerError with its status and code; an uncaught one is the caller\'s answer', async () => {
    const caught = await json(await run('caller', { mode: 'catch', to: 'upper', input: { text: 42 } }));
    assert.equal(caught.status, 200);
    assert.equal(caught.body.status, 400);
    assert.equal(caught.body.code, 'invalid_input');
    const uncaught = await json(await run('caller', { mode: 'call', to: 'upper', input: {} }));
    assert.equal(uncaught.status, 400);
    assert.equal((uncaught.body.error as { code: string }).code, 'invalid_input');
  });

  test('a chain of calls runs to the depth limit on one replica taking one request at a time, and one deeper is refused with 508', async () => {
    const ok = await json(await run('chain', { n: 4 }));
    assert.equal(ok.status, 200, JSON.stringify(ok.body));
    assert.equal(ok.body.depth, 4);
    const rids = ok.body.rids as string[];
    assert.equal(rids.length, 5);
    // Each call's request id names its caller's.
    for (let i = 1; i < rids.length; i++) assert.ok(rids[i].startsWith(`${rids[i - 1]}.`), `${rids[i]} under ${rids[i - 1]}`);
    const deep = await json(await run('chain', { n: 5 }));
    assert.equal(deep.status, 508);
    assert.equal((deep.body.error as { code: string }).code, 'call_depth_exceeded');
  });

  test('the callee gets what is left of its caller\'s time, and is stopped when it runs out', async () => {
    // Warm first: a call whose time runs out before a replica starts is taken back, never run.
    assert.equal((await run('holder', { ms: 0, tag: 'warm' })).status, 200);
    const t0 = Date.now();
    const res = await json(await run('caller', { mode: 'catch', to: 'holder', input: { ms: 30_000, tag: 'deadline' }, timeoutMs: 1_500 }));
    assert.equal(res.status, 200);
    assert.equal(res.body.status, 504);
    assert.equal(res.body.code, 'timeout');
    assert.ok(Date.now() - t0 < 10_000);
    const end = await holderEnded('deadline');
    assert.equal(end.how, 'aborted');
    assert.ok(end.afterMs < 5_000, `stopped after ${end.afterMs} ms`);
  });

  test('a caller who disconnects cancels its calls (their ctx.signal); a handler\'s own signal cancels one', async () => {
    await assert.rejects(run('caller', { mode: 'call', to: 'holder', input: { ms: 30_000, tag: 'left' } }, { signal: AbortSignal.timeout(1_500) }));
    const end = await holderEnded('left');
    assert.equal(end.how, 'aborted');
    assert.ok(end.afterMs < 10_000, `stopped after ${end.afterMs} ms`);
    const aborted = await json(await run('caller', { mode: 'abort', to: 'holder', input: { ms: 30_000, tag: 'signal' }, abortAfterMs: 300 }));
    assert.equal(aborted.status, 200);
    assert.equal(aborted.body.aborted, true);
    const own = await holderEnded('signal');
    assert.equal(own.how, 'aborted');
  });

  test('a streaming callee\'s chunks reach ctx.stream in order', async () => {
    const res = await json(await run('caller', { mode: 'stream', to: 'counter', input: { n: 4, ms: 50 } }));
    assert.equal(res.status, 200, JSON.stringify(res.body));
    assert.deepEqual(res.body.chunks, [1, 2, 3, 4].map((i) => ({ i })));
    // More than the replica passes on ahead of the handler's reading: the rest come as it reads.
    const many = await json(await run('caller', { mode: 'stream', to: 'counter', input: { n: 60 } }));
    assert.deepEqual(many.body.chunks, Array.from({ length: 60 }, (_, i) => ({ i: i + 1 })));
  });

  test('another tenant\'s function is answered exactly as a missing one, and the key\'s limits apply to calls', async () => {
    b = await tenantWithKey(p, 'calls-b');
    await deployFile(new EmbersClient({ url: p.url, apiKey: b.key }), fixture('caller.ts'));
    const other = await json(await run('caller', { mode: 'catch', to: 'upper', input: { text: 'x' } }, { key: b.key }));
    const missing = await json(await run('caller', { mode: 'catch', to: 'no-such', input: { text: 'x' } }, { key: b.key }));
    assert.equal(other.body.status, 404);
    // Names no function can have (another tenant's key, a version key) are missing too, before any lookup.
    for (const forged of ['default.upper', 'upper@v1', 'Upper', '../upper']) {
      const res = await json(await run('caller', { mode: 'catch', to: forged, input: { text: 'x' } }, { key: b.key }));
      assert.equal(res.body.status, 404, forged);
      assert.equal(res.body.code, 'function_not_found', forged);
    }
    assert.deepEqual({ ...other.body, message: String(other.body.message).replace('upper', 'NAME') }, { ...missing.body, message: String(missing.body.message).replace('no-such', 'NAME') });
    // One request in flight for this key: the call would be a second.
    const admin = (route: string, body: unknown) => p.fetch(route, { method: 'POST', body: JSON.stringify(body), headers: { authorization: `Bearer ${p.adminKey}`, 'content-type': 'application/json' } });
    const created = await admin(`/v1/tenants/${b.id}/keys`, { limits: { concurrency: 1 } });
    assert.equal(created.status, 201);
    const single = ((await created.json()) as { key: string }).key;
    await deployFile(new EmbersClient({ url: p.url, apiKey: b.key }), fixture('words.ts'));
    const limited = await json(await run('caller', { mode: 'catch', to: 'words', input: { text: 'a b' } }, { key: single }));
    assert.equal(limited.status, 200);
    assert.equal(limited.body.status, 429);
    assert.equal(limited.body.code, 'too_many_in_flight');
    const free = await json(await run('caller', { mode: 'catch', to: 'words', input: { text: 'a b' } }, { key: b.key }));
    assert.deepEqual(free.body, { got: { words: 2 } });
  });

  test('a tenant\'s budget applies to calls: one made after the budget is spent is refused with 429', async () => {
    await deployFile(new EmbersClient({ url: p.url, apiKey: b.key }), fixture('holder.ts'));
    const admin = (method: string, body?: unknown) => p.fetch(`/v1/tenants/${b.id}/budget`, { method, ...(body ? { body: JSON.stringify(body) } : {}), headers: { authorization: `Bearer ${p.adminKey}`, 'content-type': 'application/json' } });
    // Admitted while within budget; its second call comes after the budget is set below what the tenant has spent.
    const pending = run('caller', { mode: 'catch', before: { to: 'holder', input: { ms: 2_500, tag: 'budget' } }, to: 'words', input: { text: 'a' } }, { key: b.key });
    await new Promise((r) => setTimeout(r, 500));
    assert.equal((await admin('PUT', { monthlyComputeSeconds: 0.000001 })).status, 200);
    try {
      const res = await json(await pending);
      assert.equal(res.status, 200, JSON.stringify(res.body));
      assert.equal(res.body.status, 429);
      assert.equal(res.body.code, 'budget_exhausted');
    } finally {
      await admin('DELETE');
    }
  });

  test('the tail shows a call with its parent request id', async () => {
    const stop = new AbortController();
    const res = await p.fetch('/v1/functions/upper/tail', { signal: stop.signal });
    assert.equal(res.status, 200);
    const events: ServerEvent[] = [];
    void (async () => {
      for await (const e of readEvents(res.body!)) events.push(e);
    })().catch(() => {});
    try {
      await eventually(async () => events.some((e) => e.event === 'tailing'), 'the tail to start');
      const called = await run('caller', { mode: 'route', op: 'upper', text: 'tailed' });
      const rid = called.headers.get('x-request-id')!;
      await called.arrayBuffer();
      const line = await eventually(async () => events.filter((e) => e.event === 'request').map((e) => JSON.parse(e.data) as TailLine).find((l) => l.type === 'request' && l.parent === rid), 'the call\'s tail line', 15_000);
      assert.ok(line.rid!.startsWith(`${rid}.`));
    } finally {
      stop.abort();
    }
  });

  test('an async job and a batch line call too, their calls linked to them', async () => {
    const queued = await p.fetch('/v1/run/caller', { method: 'POST', headers: { prefer: 'respond-async', 'content-type': 'application/json' }, body: JSON.stringify({ mode: 'route', op: 'words', text: 'a b c d' }) });
    assert.equal(queued.status, 202);
    const { id } = (await queued.json()) as { id: string };
    const job = await eventually(async () => {
      const j = (await (await p.fetch(`/v1/jobs/${id}`)).json()) as { status: string; output?: unknown };
      return j.status === 'succeeded' || j.status === 'failed' ? j : undefined;
    }, 'the async job');
    assert.deepEqual(job.output, { by: 'words', result: { words: 4 } });
    const lines = ['one', 'two three'].map((text, i) => JSON.stringify({ custom_id: `l${i}`, input: { mode: 'route', op: 'upper', text } }));
    const created = await p.fetch('/v1/batches?function=caller', { method: 'POST', body: lines.join('\n') + '\n', headers: { 'content-type': 'application/jsonl' } });
    assert.equal(created.status, 201, await created.clone().text());
    const batch = (await created.json()) as { id: string };
    await eventually(async () => ((await (await p.fetch(`/v1/batches/${batch.id}`)).json()) as { status: string }).status === 'completed', 'the batch', 60_000);
    const output = (await (await p.fetch(`/v1/batches/${batch.id}/output`)).text()).split('\n').filter(Boolean).map((l) => JSON.parse(l) as { custom_id: string; output: unknown });
    assert.deepEqual(output.sort((a, b) => a.custom_id.localeCompare(b.custom_id)).map((o) => o.output), [{ by: 'upper', result: { text: 'ONE' } }, { by: 'upper', result: { text: 'TWO THREE' } }]);
    const calls = (await usage('upper')).filter((r) => r.parent !== undefined);
    assert.ok(calls.length >= 2);
  });

  test('a call message forged past the SDK, for a run its process was not sent, ends that process and nothing else; an input over the channel\'s bound fails only its call', async () => {
    const forged = await json(await run('call-forger', {}));
    assert.equal(forged.status, 500, JSON.stringify(forged.body));
    assert.equal((forged.body.error as { code: string }).code, 'user_code_violation');
    // An input over the channel's bound fails that call alone, in the handler, not the process.
    const big = await json(await run('caller', { mode: 'catch', to: 'upper', input: { text: '"'.repeat(600_000) } }));
    assert.equal(big.body.status, 413);
    assert.equal(big.body.code, 'call_input_too_large');
    const fine = await json(await run('caller', { mode: 'route', op: 'upper', text: 'still here' }));
    assert.deepEqual(fine.body, { by: 'upper', result: { text: 'STILL HERE' } });
  });
});
