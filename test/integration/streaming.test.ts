// Streamed answers: a handler that yields, read as Server-Sent Events by a sync caller (in order,
// as they come, paused by a slow reader), gathered for a caller that asks for JSON, kept for an
// async job's /events (replayed after Last-Event-ID, followed live) and a batch line's output;
// and a caller who leaves stopping the handler, streaming or not, with its usage record saying
// so. Replicas here run two live requests at once, so a request can wait behind two long ones.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { readEvents, type ServerEvent } from '../../cli/sse.ts';
import { UNREAD_MAX, SEND_WINDOW } from '../../core/chunks.ts';
import { usageKeys } from '../../core/keys.ts';
import type { UsageRecord } from '../../core/usage.ts';
import { eventually, fixture, shipped, startTestPlatform, type TestPlatform } from '../helpers/platform.ts';

let p: TestPlatform;

before(async () => {
  p = await startTestPlatform({ EMBERS_REPLICA_CONCURRENCY: '2', EMBERS_SCHEDULER_TICK_MS: '100' });
  await p.deploy(fixture('counter.ts'));
  await p.deploy(fixture('order.ts'));
  await p.deploy(shipped('echo.ts'));
});
after(() => p.close());

const EVENTS = { accept: 'text/event-stream', 'content-type': 'application/json' };

const run = (fn: string, input: unknown, headers: Record<string, string> = {}, signal?: AbortSignal) =>
  p.fetch(`/v1/run/${fn}`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(input), signal });

/** Every event of a response, with when each arrived. */
async function allEvents(res: Response): Promise<(ServerEvent & { at: number })[]> {
  const out: (ServerEvent & { at: number })[] = [];
  for await (const e of readEvents(res.body!)) out.push({ ...e, at: performance.now() });
  return out;
}

const report = async () => ((await (await run('counter', { mode: 'report' })).json()) as [{ yielded: number; stopped: number; finished: number }])[0];

/** The chunk streams of sync runs (an async job's are kept for its retention). */
const syncChunkStreams = async () => (await p.redis().keys('embers:chunks:*')).filter((k) => !k.includes(':job_'));

/** The usage records of a function (by its key), newest last. */
async function usage(fn: string): Promise<UsageRecord[]> {
  const entries = await p.redis().xrange(usageKeys.records, '-', '+');
  return entries.map(([, f]) => JSON.parse(f[1]) as UsageRecord).filter((r) => r.fn === fn);
}

describe('streamed answers', () => {
  test('SSE: chunks in order, each as it comes, then done with the timing', async () => {
    const res = await run('counter', { n: 5, ms: 200 }, EVENTS);
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type')!, /^text\/event-stream/);
    const events = await allEvents(res);
    const chunks = events.filter((e) => e.event === 'chunk');
    assert.deepEqual(chunks.map((e) => e.id), ['1', '2', '3', '4', '5']);
    assert.deepEqual(chunks.map((e) => JSON.parse(e.data)), [1, 2, 3, 4, 5].map((i) => ({ i })));
    const done = events.at(-1)!;
    assert.equal(done.event, 'done');
    assert.equal(done.id, undefined);
    const end = JSON.parse(done.data) as { status: number; timing: { handlerMs: number; totalMs: number; queueMs: number }; serverTiming: string };
    assert.equal(end.status, 200);
    assert.ok(end.timing.handlerMs >= 800 && end.timing.totalMs >= end.timing.handlerMs, JSON.stringify(end));
    assert.match(end.serverTiming, /queue;dur=.*handler;dur=.*total;dur=/);
    // The first chunk came while the handler still ran (four more waits of 200 ms were ahead).
    assert.ok(done.at - chunks[0].at > 400, `first chunk ${Math.round(done.at - chunks[0].at)} ms before the end`);
    // The gateway removed the run's chunks once its caller had them.
    await eventually(async () => (await syncChunkStreams()).length === 0, 'the chunks to be removed');
  });

  test('a caller that does not ask for events gets the chunks as a JSON array', async () => {
    const res = await run('counter', { n: 4 });
    assert.equal(res.status, 200);
    assert.deepEqual(await res.json(), [{ i: 1 }, { i: 2 }, { i: 3 }, { i: 4 }]);
    assert.match(res.headers.get('server-timing')!, /handler;dur=/);
  });

  test('a handler that returns is one chunk; a failure before any chunk is a plain error, after some an error event', async () => {
    const echo = await allEvents(await run('echo', { hello: 'events' }, EVENTS));
    assert.deepEqual(echo.map((e) => [e.event, e.id]), [['chunk', '1'], ['done', undefined]]);
    assert.deepEqual(JSON.parse(echo[0].data), { hello: 'events' });

    const early = await run('counter', { mode: 'fail' }, EVENTS);
    assert.equal(early.status, 500);
    assert.match(early.headers.get('content-type')!, /json/);
    assert.match(((await early.json()) as { error: { message: string } }).error.message, /no chunks today/);

    const late = await allEvents(await run('counter', { mode: 'failLate', n: 5 }, EVENTS));
    assert.deepEqual(late.map((e) => e.event), ['chunk', 'chunk', 'error']);
    const failure = JSON.parse(late[2].data) as { status: number; error: { code: string; message: string } };
    assert.equal(failure.status, 500);
    assert.equal(failure.error.code, 'handler_error');
    assert.match(failure.error.message, /failed after two chunks/);
  });

  test('async job: /events follows it live, replays after Last-Event-ID, and ends with its outcome', async () => {
    const submitted = await p.fetch('/v1/run/counter', { method: 'POST', headers: { prefer: 'respond-async' }, body: JSON.stringify({ n: 6, ms: 150 }) });
    assert.equal(submitted.status, 202);
    const { id } = (await submitted.json()) as { id: string };
    // Followed from the start, while it runs.
    const live = await allEvents(await p.fetch(`/v1/jobs/${id}/events`));
    assert.deepEqual(live.map((e) => e.id ?? e.event), ['1', '2', '3', '4', '5', '6', 'done']);
    assert.deepEqual(JSON.parse(live[5].data), { i: 6 });
    const done = JSON.parse(live[6].data) as { status: string; httpStatus: number; timing: { handlerMs: number } };
    assert.equal(done.status, 'succeeded');
    assert.equal(done.httpStatus, 200);
    assert.ok(done.timing.handlerMs >= 750);
    // A reconnect after chunk 3 gets 4 to 6, then the end.
    const resumed = await allEvents(await p.fetch(`/v1/jobs/${id}/events`, { headers: { 'last-event-id': '3' } }));
    assert.deepEqual(resumed.map((e) => e.id ?? e.event), ['4', '5', '6', 'done']);
    // Its output is the chunks gathered.
    const job = (await (await p.fetch(`/v1/jobs/${id}`)).json()) as { status: string; output: unknown };
    assert.equal(job.status, 'succeeded');
    assert.deepEqual(job.output, [1, 2, 3, 4, 5, 6].map((i) => ({ i })));

    const bad = await p.fetch(`/v1/jobs/${id}/events`, { headers: { 'last-event-id': 'chunk-3' } });
    assert.equal(bad.status, 400);
    assert.match(((await bad.json()) as { error: { message: string } }).error.message, /Last-Event-ID/);
    assert.equal((await p.fetch('/v1/jobs/job_nope/events')).status, 404);
  });

  test('a batch line of a streaming handler has its chunks gathered as its output', async () => {
    const jsonl = [1, 2].map((n) => JSON.stringify({ custom_id: `l${n}`, input: { n } })).join('\n');
    const res = await p.fetch('/v1/batches?function=counter', { method: 'POST', body: jsonl, headers: { 'content-type': 'application/jsonl' } });
    assert.equal(res.status, 201);
    const { id } = (await res.json()) as { id: string };
    await eventually(async () => ((await (await p.fetch(`/v1/batches/${id}`)).json()) as { status: string }).status === 'completed', 'the batch to complete', 60_000);
    const lines = (await (await p.fetch(`/v1/batches/${id}/output`)).text()).trim().split('\n').map((l) => JSON.parse(l) as { custom_id: string; output: unknown });
    assert.deepEqual(lines.sort((a, b) => a.custom_id.localeCompare(b.custom_id)).map((l) => l.output), [[{ i: 1 }], [{ i: 1 }, { i: 2 }]]);
  });

  test('a slow reader pauses the handler: the replica holds back credit, nothing piles up', async () => {
    const reading = new AbortController();
    const before = await report();
    const res = await run('counter', { n: 5000, pad: 16_000 }, EVENTS, reading.signal);
    assert.equal(res.status, 200);
    const events = readEvents(res.body!);
    assert.equal((await events.next()).value?.event, 'chunk');
    // Not reading: the socket fills, the gateway stops reading Redis, the replica stops crediting.
    const plateau = await eventually(async () => {
      const a = (await report()).yielded;
      await new Promise((r) => setTimeout(r, 500));
      const b = (await report()).yielded;
      return a === b ? b : null;
    }, 'the handler to pause');
    assert.ok(plateau - before.yielded < 5000, `it yielded ${plateau - before.yielded} of 5000 while nothing was read`);
    const streams = await syncChunkStreams();
    assert.equal(streams.length, 1);
    const unread = await p.redis().xlen(streams[0]);
    assert.ok(unread <= UNREAD_MAX + SEND_WINDOW, `${unread} chunks unread in Redis`);
    // Reading again, it goes on (once what the sockets hold is read).
    let read = 1;
    while ((await report()).yielded === plateau) {
      for (let i = 0; i < 50; i++, read++) assert.equal((await events.next()).value?.event, 'chunk');
      assert.ok(read < 5000, 'it never went on');
    }
    reading.abort();
    await eventually(async () => (await report()).stopped > before.stopped, 'the handler to stop once its caller left');
  });

  test('disconnect cancels: a streaming caller leaving stops the handler, metered as disconnected', async () => {
    const before = await report();
    const leaving = new AbortController();
    const res = await run('counter', { n: 1000, ms: 50 }, EVENTS, leaving.signal);
    const events = readEvents(res.body!);
    assert.equal((await events.next()).value?.id, '1');
    assert.equal((await events.next()).value?.id, '2');
    leaving.abort();
    await eventually(async () => (await report()).stopped > before.stopped, 'the handler to stop');
    const record = await eventually(async () => (await usage('counter')).find((r) => r.disconnected), 'a usage record of the disconnect');
    assert.equal(record.status, 499);
    assert.equal(record.kind, 'sync');
    assert.ok(record.bytesOut > 0, 'the chunks it was sent are metered');
    assert.ok(record.computeMs < 30_000);
    await eventually(async () => (await syncChunkStreams()).length === 0, 'the chunks to be removed');
  });

  test('disconnect cancels a plain run too; one still queued never runs', async () => {
    const seq = async () => ((await (await run('order', {})).json()) as { seq: number }).seq;
    const base = await seq();
    const callers = ['a', 'b', 'c'].map(() => new AbortController());
    // Two take the replica's two slots; the third waits in the queue behind them.
    const calls = ['a', 'b', 'c'].map((tag, i) => run('order', { ms: 30_000, tag }, {}, callers[i].signal).catch(() => null));
    await eventually(async () => (await p.redis().xlen('embers:stream:order')) === 3, 'three requests queued or running');
    await new Promise((r) => setTimeout(r, 300));
    for (const c of callers.reverse()) c.abort();
    await Promise.all(calls);
    const records = await eventually(async () => {
      const found = (await usage('order')).filter((r) => r.disconnected);
      return found.length === 2 ? found : null;
    }, 'the two running requests to be metered as disconnected');
    for (const r of records) {
      assert.equal(r.status, 499);
      assert.ok(r.computeMs < 20_000, `stopped early (${r.computeMs} ms)`);
    }
    // The queued one was taken back: only the two and this call ran since base.
    assert.equal(await seq(), base + 3);
  });
});
