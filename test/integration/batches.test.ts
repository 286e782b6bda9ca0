// Bulk batches: thousands of echo lines and hundreds of ocr lines with bad ones mixed in, every
// custom_id exactly once across output and errors; an S3 input; cancel; and a platform restart
// (replicas SIGKILLed) mid-batch that loses and duplicates nothing.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { eventually, fixture, shipped, startTestPlatform, textImage, type TestPlatform } from '../helpers/platform.ts';

let p: TestPlatform;

before(async () => {
  p = await startTestPlatform({ EMBERS_BATCH_MAX_OUTSTANDING: '64', EMBERS_SCHEDULER_TICK_MS: '100', EMBERS_MAX_BATCH_BYTES: String(4 * 1024 * 1024) });
  await p.deploy(shipped('echo.ts'));
  await p.deploy(fixture('sleepy.ts'));
});
after(() => p.close());

interface Batch {
  id: string;
  status: string;
  request_counts: { total: number; completed: number; failed: number };
  outputUri?: string;
  errorsUri?: string;
  error?: string;
}

/** A body of `n` chunks of `size` bytes, sent chunked (a stream has no Content-Length). */
const chunked = (n: number, size: number) => {
  const chunk = new TextEncoder().encode('x'.repeat(size));
  let sent = 0;
  return new ReadableStream<Uint8Array>({
    pull(ctl) {
      if (sent++ < n) ctl.enqueue(chunk);
      else ctl.close();
    },
  });
};

const create = async (fn: string, jsonl: string): Promise<Batch> => {
  const res = await p.fetch(`/v1/batches?function=${fn}`, { method: 'POST', body: jsonl, headers: { 'content-type': 'application/jsonl' } });
  assert.equal(res.status, 201, await res.clone().text());
  return (await res.json()) as Batch;
};
const get = async (id: string) => (await (await p.fetch(`/v1/batches/${id}`)).json()) as Batch;
const settled = (id: string, timeoutMs = 60_000) =>
  eventually(async () => {
    const b = await get(id);
    return ['completed', 'failed', 'cancelled'].includes(b.status) ? b : null;
  }, `batch ${id} to finish`, timeoutMs);
const file = async (id: string, which: 'output' | 'errors') => {
  const res = await p.fetch(`/v1/batches/${id}/${which}`);
  assert.equal(res.status, 200);
  const text = await res.text();
  return text.split('\n').filter(Boolean).map((l) => JSON.parse(l) as { custom_id: string | null; line?: number; output?: any; error?: { code: string; message: string } });
};

/** Every expected custom_id appears exactly once across both files. */
function exactlyOnce(ids: (string | null)[], expected: string[]) {
  const seen = new Map<string, number>();
  for (const id of ids) if (id !== null) seen.set(id, (seen.get(id) ?? 0) + 1);
  for (const id of expected) assert.equal(seen.get(id), 1, `custom_id ${id} appears ${seen.get(id) ?? 0} times`);
}

describe('bulk batches', () => {
  test('a few thousand echo lines, bad ones reported by line number without failing the batch', async () => {
    const lines: string[] = [];
    const good: string[] = [];
    for (let i = 0; i < 3000; i++) {
      lines.push(JSON.stringify({ custom_id: `e${i}`, input: { i, text: `line ${i}` } }));
      good.push(`e${i}`);
    }
    lines.splice(10, 0, '{"custom_id": "broken", "input": '); // line 11: not JSON
    lines.splice(20, 0, JSON.stringify({ input: { no: 'id' } })); // line 21: no custom_id
    lines.splice(30, 0, JSON.stringify({ custom_id: 'e5', input: { dup: true } })); // line 31: duplicate custom_id
    lines.splice(40, 0, ''); // a blank line is skipped, not counted
    const created = await create('echo', lines.join('\n') + '\n');
    assert.equal(created.status, 'validating');
    const done = await settled(created.id);
    assert.equal(done.status, 'completed');
    assert.deepEqual(done.request_counts, { total: 3003, completed: 3000, failed: 3 });
    const output = await file(created.id, 'output');
    const errors = await file(created.id, 'errors');
    assert.equal(output.length, 3000);
    exactlyOnce([...output, ...errors.filter((e) => e.error!.code !== 'duplicate_custom_id')].map((l) => l.custom_id), good);
    for (const o of output) assert.equal(o.output.text, `line ${o.output.i}`);
    assert.deepEqual(
      errors.map((e) => [e.line, e.error!.code]),
      [
        [11, 'invalid_json'],
        [21, 'missing_custom_id'],
        [31, 'duplicate_custom_id'],
      ],
    );
    assert.ok(done.outputUri?.startsWith('s3://'));
  });

  test('ocr lines run the real models; input the schema refuses fails only its line', async () => {
    await p.deploy(shipped('ocr/index.ts'));
    const image = (await textImage(['BATCH 42'], 280)).toString('base64');
    const lines = Array.from({ length: 200 }, (_, i) => JSON.stringify(i % 50 === 7 ? { custom_id: `o${i}`, input: { picture: image } } : { custom_id: `o${i}`, input: { image } }));
    const created = await create('ocr', lines.join('\n'));
    // Live requests while the batch runs: answered, and the replicas' records show batch lines
    // stepping aside for them (runtime/user-code/live-first.ts).
    await eventually(async () => (await get(created.id)).request_counts.completed >= 5, 'the ocr batch to be running', 120_000);
    for (let i = 0; i < 3; i++) {
      const live = await p.fetch('/v1/run/ocr', { method: 'POST', body: JSON.stringify({ image }) });
      assert.equal(live.status, 200);
      assert.match(await live.text(), /BATCH\s?42/);
    }
    await eventually(async () => {
      const fn = (await (await p.fetch('/v1/functions/ocr')).json()) as { replicas: { liveFirst?: { yields: number } }[] };
      return fn.replicas.reduce((a, r) => a + (r.liveFirst?.yields ?? 0), 0) >= 1;
    }, 'a replica record to show batch work yielding to live requests');
    const done = await settled(created.id, 120_000);
    assert.equal(done.status, 'completed');
    assert.deepEqual(done.request_counts, { total: 200, completed: 196, failed: 4 });
    const output = await file(created.id, 'output');
    const errors = await file(created.id, 'errors');
    exactlyOnce([...output, ...errors].map((l) => l.custom_id), lines.map((_, i) => `o${i}`));
    assert.deepEqual(errors.map((e) => e.error!.code), Array(4).fill('invalid_input'));
    assert.deepEqual(errors.map((e) => e.line), [8, 58, 108, 158]);
    for (const o of output) assert.match(JSON.stringify(o.output), /BATCH\s?42/);
    // Its idle replicas would hold this small node's slots for minutes: make room for the next tests.
    assert.equal((await p.fetch('/v1/functions/ocr', { method: 'DELETE' })).status, 200);
  });

  test('input from S3 by URI; bad requests are 4xx with a message', async () => {
    const store = (await import('../../core/s3.ts')).storeFromConfig({ EMBERS_S3_ENDPOINT: p.s3Endpoint, EMBERS_S3_BUCKET: 'embers' });
    // Objects a tenant puts in the bucket itself go under tenants/<its id>/ (test/integration/storage.test.ts).
    await store.put('tenants/default/uploads/few.jsonl', ['a', 'b', 'c'].map((c) => JSON.stringify({ custom_id: c, input: c })).join('\n'));
    const res = await p.fetch('/v1/batches', { method: 'POST', body: JSON.stringify({ function: 'echo', input_uri: 's3://embers/tenants/default/uploads/few.jsonl' }) });
    assert.equal(res.status, 201);
    const done = await settled(((await res.json()) as Batch).id);
    assert.deepEqual(done.request_counts, { total: 3, completed: 3, failed: 0 });

    // JSONL sent chunked (no Content-Length) under the limit: spooled through a file, then stored.
    const lines = new TextEncoder().encode(['x', 'y'].map((c) => JSON.stringify({ custom_id: c, input: c })).join('\n'));
    const halves = [lines.slice(0, 10), lines.slice(10)];
    const streamed = new ReadableStream<Uint8Array>({ pull: (ctl) => (halves.length ? ctl.enqueue(halves.shift()!) : ctl.close()) });
    const sent = await p.fetch('/v1/batches?function=echo', { method: 'POST', body: streamed, duplex: 'half' } as RequestInit);
    assert.equal(sent.status, 201, await sent.clone().text());
    assert.deepEqual((await settled(((await sent.json()) as Batch).id)).request_counts, { total: 2, completed: 2, failed: 0 });

    const cases: [string, RequestInit, number, RegExp][] = [
      ['/v1/batches', { method: 'POST', body: JSON.stringify({ function: 'echo', input_uri: 's3://embers/tenants/default/missing.jsonl' }) }, 400, /does not exist/],
      // Checked by S3's bucket naming rules before any lookup (these were 500s).
      ['/v1/batches', { method: 'POST', body: JSON.stringify({ function: 'echo', input_uri: 's3://EMBERS/x.jsonl' }) }, 400, /bucket names hold only lower-case letters/],
      ['/v1/batches', { method: 'POST', body: JSON.stringify({ function: 'echo', input_uri: 's3://a/b' }) }, 400, /bucket names are 3 to 63 characters/],
      ['/v1/batches', { method: 'POST', body: JSON.stringify({ function: 'echo' }) }, 400, /input_uri/],
      ['/v1/batches', { method: 'POST', body: 'not json' }, 400, /JSON/],
      ['/v1/batches?function=nope', { method: 'POST', body: '{}' }, 404, /no function/],
      ['/v1/batches?function=echo', { method: 'POST', body: '' }, 400, /empty/],
      ['/v1/batches/batch_nope', {}, 404, /no batch/],
      ['/v1/batches/batch_nope/cancel', { method: 'POST' }, 404, /no batch/],
      ['/v1/batches?limit=abc', {}, 400, /limit must be a whole number from 1 to 100/],
      ['/v1/batches?limit=500', {}, 400, /limit must be a whole number from 1 to 100/],
      // Chunked (no Content-Length): counted as it streams, refused before it is all buffered.
      ['/v1/batches?function=echo', { method: 'POST', body: chunked(5, 1024 * 1024), duplex: 'half' } as RequestInit, 413, /EMBERS_MAX_BATCH_BYTES/],
      ['/v1/batches', { method: 'POST', body: chunked(12, 1024 * 1024), duplex: 'half' } as RequestInit, 413, /send JSONL with \?function=NAME/],
    ];
    for (const [route, init, status, message] of cases) {
      const r = await p.fetch(route, init);
      const body = (await r.json()) as { error: { message: string } };
      assert.equal(r.status, status, `${route}: ${body.error.message}`);
      assert.match(body.error.message, message);
    }
    store.destroy();
  });

  test('fast lines go in chunks; a line that kills its replica is answered, and every line once', async () => {
    await p.deploy(fixture('boom.ts'));
    const n = 6000;
    const poison = 5900;
    const lines = Array.from({ length: n }, (_, i) => JSON.stringify({ custom_id: `b${i + 1}`, input: { mode: i + 1 === poison ? 'exit' : 'ok' } }));
    const created = await create('boom', lines.join('\n'));
    const done = await settled(created.id, 120_000);
    assert.equal(done.status, 'completed');
    // The feeder had cut chunks before the poison line (scheduler/batch-pace.ts chunkLines).
    const [size, from] = (await p.redis().hmget(`embers:batch:${created.id}`, 'chunkSize', 'chunkFrom')).map(Number);
    assert.ok(size! > 1 && from! <= poison, `chunks of ${size} lines from line ${from}: the poison line ${poison} should be in one`);
    const output = await file(created.id, 'output');
    const errors = await file(created.id, 'errors');
    exactlyOnce([...output, ...errors].map((l) => l.custom_id), lines.map((_, i) => `b${i + 1}`));
    // Only the poison line fails: the lines that ran beside it when it killed a replica (a crash
    // ends every job its replica held) ran again alone, not beside it a second time (before
    // runAlone, up to EMBERS_BATCH_CONCURRENCY − 1 of them were answered replica_crashed too).
    assert.deepEqual(errors.map((e) => [e.line, e.error!.code]), [[poison, 'replica_crashed']]);
    assert.deepEqual(done.request_counts, { total: n, completed: output.length, failed: errors.length });
    // Its idle replicas would hold this small node's slots for minutes: make room for the next tests.
    assert.equal((await p.fetch('/v1/functions/boom', { method: 'DELETE' })).status, 200);
  });

  test('batch lines held back by steady live traffic for longer than their budget wait, and are not timed out', async () => {
    await p.deploy(fixture('patient.ts'));
    const call = async (i: number) => {
      const res = await p.fetch('/v1/run/patient', { method: 'POST', body: JSON.stringify({ i }) });
      assert.equal(res.status, 200, await res.clone().text());
    };
    await call(0);
    const replicaIds = async () => ((await (await p.fetch('/v1/functions/patient')).json()) as { replicas: { id: string }[] }).replicas.map((r) => r.id);
    const before = await replicaIds();
    const lines = Array.from({ length: 60 }, (_, i) => JSON.stringify({ custom_id: `p${i}`, input: { i } }));
    const created = await create('patient', lines.join('\n'));
    await eventually(async () => (await get(created.id)).request_counts.completed >= 1, 'the batch to be running', 60_000);
    // Live requests back to back on two connections for 3 s, ~4 times the function's 800 ms
    // budget: the batch lines in the replica wait at the live-first gate all that time.
    const until = Date.now() + 3000;
    let live = 0;
    await Promise.all([0, 1].map(async () => {
      while (Date.now() < until) await call(++live);
    }));
    const done = await settled(created.id, 60_000);
    assert.equal(done.status, 'completed');
    const errors = await file(created.id, 'errors');
    assert.deepEqual(errors.map((e) => e.error!.code), [], 'no line timed out');
    assert.deepEqual(done.request_counts, { total: 60, completed: 60, failed: 0 });
    assert.deepEqual(await replicaIds(), before, 'the replica was not replaced as stuck');
    assert.equal((await p.fetch('/v1/functions/patient', { method: 'DELETE' })).status, 200);
  });

  test('cancel stops feeding, keeps what finished, and never lists a line twice', async () => {
    const lines = Array.from({ length: 400 }, (_, i) => JSON.stringify({ custom_id: `c${i}`, input: { ms: 200, tag: `c${i}` } }));
    const created = await create('sleepy', lines.join('\n'));
    await eventually(async () => (await get(created.id)).request_counts.completed >= 10, 'some lines to finish');
    const early = await p.fetch(`/v1/batches/${created.id}/output`);
    assert.equal(early.status, 409);
    const res = await p.fetch(`/v1/batches/${created.id}/cancel`, { method: 'POST' });
    assert.equal(res.status, 200);
    assert.equal(((await res.json()) as Batch).status, 'cancelling');
    const done = await settled(created.id);
    assert.equal(done.status, 'cancelled');
    const output = await file(created.id, 'output');
    assert.equal(output.length, done.request_counts.completed);
    assert.ok(done.request_counts.completed < 400);
    assert.equal(new Set(output.map((o) => o.custom_id)).size, output.length);
    const again = await p.fetch(`/v1/batches/${created.id}/cancel`, { method: 'POST' });
    assert.equal(again.status, 409);
  });

  test('a restart of the gateway, scheduler and agent (replicas killed) mid-batch loses and duplicates nothing', async () => {
    const lines = Array.from({ length: 600 }, (_, i) => JSON.stringify({ custom_id: `r${i}`, input: { ms: 100, tag: `r${i}` } }));
    const created = await create('sleepy', lines.join('\n'));
    await eventually(async () => (await get(created.id)).request_counts.completed >= 100, 'the batch to be well under way');
    await p.restart({ kill: true });
    const mid = await get(created.id);
    assert.ok(mid.request_counts.completed < 600, 'restarted before the end');
    const done = await settled(created.id, 120_000);
    assert.equal(done.status, 'completed');
    assert.deepEqual(done.request_counts, { total: 600, completed: 600, failed: 0 });
    const output = await file(created.id, 'output');
    assert.equal(output.length, 600);
    exactlyOnce(output.map((o) => o.custom_id), lines.map((_, i) => `r${i}`));
  });
});
