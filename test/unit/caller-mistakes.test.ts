// Issue 28, "no 5xx for a caller's mistake": the pure parts of each bound (JSON depth, ids,
// schema size, config) and the gateway's JSON reading through a bare Hono app.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Hono } from 'hono';
import { BATCH_ID, BatchStore, chunkJob, lineJob } from '../../core/batches.ts';
import { ConfigError, loadConfig } from '../../core/config.ts';
import { JOB_ID, JobStore } from '../../core/jobs.ts';
import { DEFAULT_MAX_JSON_DEPTH, nestsDeeperThan } from '../../core/json-depth.ts';
import { createLogger } from '../../core/log.ts';
import { CHECK_BYTES_BUDGET, CHECK_PARTS_BUDGET, checkInput, compileInputSchema, MAX_SCHEMA_PARTS, schemaTooLarge } from '../../core/validate.ts';
import { onError } from '../../gateway/errors.ts';
import { readJson } from '../../gateway/request-body.ts';
import { parseLine, splitUnwritable } from '../../scheduler/batch-lines.ts';

const nested = (n: number, inner = '1') => `${'['.repeat(n)}${inner}${']'.repeat(n)}`;

/** An array nested `n` deep, built without recursion (deeper than JSON.stringify can write). */
function deepValue(n: number): unknown {
  let v: unknown = 1;
  for (let i = 0; i < n; i++) v = [v];
  return v;
}

describe('JSON nesting depth', () => {
  const deeper = (json: string, max: number) => nestsDeeperThan(JSON.parse(json), max);

  it('counts arrays and objects inside each other, up to and past the limit', () => {
    assert.equal(deeper(nested(128), 128), false);
    assert.equal(deeper(nested(129), 128), true);
    assert.equal(deeper(`{"a":${nested(5)}}`, 5), true);
    assert.equal(deeper(`{"a":${nested(4)}}`, 5), false);
    assert.equal(deeper(`{"a":{"b":{"c":{}}}}`, 3), true);
    // Siblings do not add up; values that are not containers are no level.
    assert.equal(deeper(`[${Array.from({ length: 200 }, () => '[[]]').join(',')}]`, 3), false);
    assert.equal(deeper('"[[[[[["', 0), false);
    assert.equal(deeper('null', 0), false);
  });

  it('brackets inside strings are no nesting', () => {
    assert.equal(deeper(JSON.stringify({ s: '[[[[[[[[[[{{{{{{{{' }), 1), false);
  });

  it('walks input nested far past the stack without recursion', () => {
    assert.equal(nestsDeeperThan(deepValue(200_000), 128), true);
  });

  it('defaults to 128 levels, configurable from 16 to 1000', () => {
    assert.equal(DEFAULT_MAX_JSON_DEPTH, 128);
    assert.equal(loadConfig({}).EMBERS_MAX_JSON_DEPTH, 128);
    assert.equal(loadConfig({ EMBERS_MAX_JSON_DEPTH: '64' }).EMBERS_MAX_JSON_DEPTH, 64);
    for (const bad of ['8', '5000', 'deep']) assert.throws(() => loadConfig({ EMBERS_MAX_JSON_DEPTH: bad }), (err: Error) => err instanceof ConfigError && /EMBERS_MAX_JSON_DEPTH/.test(err.message));
  });
});

describe('the gateway reading a JSON body', () => {
  const app = new Hono();
  app.onError(onError(createLogger('test', 'silent')));
  app.post('/', async (c) => c.json({ got: await readJson(c, 4) }));
  const post = (body: string) => app.request('/', { method: 'POST', body, headers: { 'content-type': 'application/json' } });

  it('answers 400 too_deep, naming the limit and its variable, for a body nested past it', async () => {
    const res = await post(nested(5000));
    assert.equal(res.status, 400);
    const { error } = (await res.json()) as { error: { code: string; message: string } };
    assert.equal(error.code, 'too_deep');
    assert.match(error.message, /more than 4 levels deep.*EMBERS_MAX_JSON_DEPTH/);
  });

  it('takes a body at the limit, and still reports invalid JSON as such', async () => {
    assert.deepEqual(await (await post(nested(4))).json(), { got: deepValue(4) });
    const res = await post(`${'['.repeat(50)}oops`);
    assert.equal(res.status, 400);
    assert.equal(((await res.json()) as { error: { code: string } }).error.code, 'invalid_json');
  });

  it('answers 400 incomplete_body when the caller closed its connection mid-body', async () => {
    const cut = new Hono();
    cut.onError(onError(createLogger('test', 'silent')));
    cut.post('/', () => {
      // What Node's request stream rejects with then.
      throw Object.assign(new Error('aborted'), { code: 'ECONNRESET' });
    });
    const res = await cut.request('/', { method: 'POST', body: '{' });
    assert.equal(res.status, 400);
    assert.equal(((await res.json()) as { error: { code: string } }).error.code, 'incomplete_body');
  });
});

describe('batch lines that cannot run', () => {
  it('a line whose input nests past the limit fails alone, with too_deep', () => {
    const line = (input: string) => `{"custom_id":"a","input":${input}}`;
    assert.deepEqual(parseLine(line(nested(128)), 128), { cid: 'a', input: deepValue(128) });
    const item = parseLine(line(nested(129)), 128);
    assert.ok('error' in item);
    assert.equal(item.error.code, 'too_deep');
    assert.match(item.error.message, /more than 128 levels/);
    // Its custom_id goes with it to the errors file.
    assert.equal(item.cid, 'a');
  });

  it('a line whose input cannot be written as JSON is taken out of its job, the rest kept', () => {
    const meta = { enq: 0 };
    const unwritable = deepValue(200_000);
    assert.throws(() => JSON.stringify(unwritable), RangeError);
    const jobs = [
      lineJob('batch_x', { line: 1, cid: 'a', input: unwritable, bin: 1 }, meta),
      lineJob('batch_x', { line: 2, cid: 'b', input: { ok: true }, bin: 1 }, meta),
      chunkJob('batch_x', 3, [3, 4, 5].map((line) => ({ line, cid: `c${line}`, input: line === 4 ? unwritable : line, bin: 1 })), meta),
      chunkJob('batch_x', 6, [{ line: 6, cid: 'd', input: unwritable, bin: 1 }], meta),
    ];
    const { queueable, unwritable: bad } = splitUnwritable(jobs);
    assert.deepEqual(bad.map((b) => [b.line, b.cid]), [[1, 'a'], [4, 'c4'], [6, 'd']]);
    assert.match(bad[0].reason, /call stack/);
    // The line job of line 2, and the chunk of line 3 under its own id without line 4; the chunk of line 6 is empty and goes.
    assert.deepEqual(queueable.map((j) => j.opts.jobId), ['batch_x.2', 'batch_x.c3']);
    const chunk = queueable[1].data as { chunk: { lines: { line: number }[] } };
    assert.deepEqual(chunk.chunk.lines.map((l) => l.line), [3, 5]);
  });
});

describe('ids checked by format before any lookup', () => {
  it('every id the stores make has their format', () => {
    for (let i = 0; i < 200; i++) {
      assert.match(JobStore.newId(), JOB_ID);
      assert.match(BatchStore.newId(), BATCH_ID);
    }
  });

  it('ids that address other keys or are not ids do not', () => {
    const job = JobStore.newId();
    const batch = BatchStore.newId();
    for (const bad of [`${job}:gone`, `${job}x`, job.slice(0, -1), 'job_', '%', `${batch}`]) assert.doesNotMatch(bad, JOB_ID);
    for (const bad of [`${batch}:results`, `${batch}.1`, batch.slice(0, -1), job]) assert.doesNotMatch(bad, BATCH_ID);
  });
});

describe('input schemas a deploy may bring', () => {
  it('refuses one with more than 1,000 objects and arrays, or over 256 KiB', () => {
    const properties = Object.fromEntries(Array.from({ length: MAX_SCHEMA_PARTS }, (_, i) => [`p${i}`, { type: 'string', pattern: `^a${i}$` }]));
    assert.match(schemaTooLarge({ type: 'object', properties }) ?? '', /more than 1000 objects and arrays/);
    assert.match(schemaTooLarge({ enum: ['x'.repeat(300 * 1024)] }) ?? '', /bytes as JSON, over 262144/);
    // Counted without recursion: a schema nested far past the stack is judged, not a crash.
    assert.match(schemaTooLarge(deepValue(200_000)) ?? '', /more than 1000/);
  });

  it('takes ordinary ones', () => {
    assert.equal(schemaTooLarge({ type: 'object', properties: { image: { type: 'string' }, size: { type: 'number', default: 128 } }, required: ['image'] }), undefined);
    assert.equal(schemaTooLarge({ enum: Array.from({ length: 5000 }, (_, i) => `label${i}`) }), undefined);
  });
});

describe('a recursive input schema', () => {
  const tree = compileInputSchema({ $defs: { n: { type: 'array', items: { $ref: '#/$defs/n' } } }, $ref: '#/$defs/n' });

  it('is left to the replica: references can make a check exponential in the depth', () => {
    // Two branches of an anyOf that refer back double the work at every level: 24 levels
    // stalled the gateway 2.6 s, 40 would take days. The replica checks with the function's zod.
    const doubling = compileInputSchema({ $ref: '#/$defs/x', $defs: { x: { anyOf: [{ type: 'array', items: { $ref: '#/$defs/x' }, minItems: 2 }, { type: 'array', items: { $ref: '#/$defs/x' } }] } } });
    const t0 = performance.now();
    assert.equal(checkInput(doubling, JSON.parse(nested(60, ''))), 'valid');
    assert.ok(performance.now() - t0 < 1_000);
    assert.equal(checkInput(tree, deepValue(1000)), 'valid');
    assert.equal(checkInput(tree, JSON.parse(nested(200_000, ''))), 'valid');
    assert.throws(() => compileInputSchema({ $ref: '#/$defs/missing' }), /can't resolve reference/);
  });
});

describe('uniqueItems', () => {
  it('is left to the replica: ajv compares every pair of items', () => {
    const set = compileInputSchema({ type: 'array', uniqueItems: true });
    const t0 = performance.now();
    assert.equal(checkInput(set, Array.from({ length: 50_000 }, (_, i) => ({ i }))), 'valid');
    assert.ok(performance.now() - t0 < 1_000);
    // A property that is only called uniqueItems is no such keyword.
    assert.equal(checkInput(compileInputSchema({ type: 'object', properties: { uniqueItems: { type: 'boolean' } } }), { uniqueItems: 1 }), 'invalid');
  });
});

describe('a check whose cost is the schema times the input', () => {
  it('is made up to CHECK_BUDGET; past it the input passes, for the replica to judge', () => {
    // An enum of 20,000 labels compared with each of 100,000 items stalled the gateway 9.8 s.
    const labels = compileInputSchema({ type: 'array', items: { enum: Array.from({ length: 20_000 }, (_, i) => `l${i}`) } });
    const t0 = performance.now();
    assert.equal(checkInput(labels, [...Array(100_000).fill('l19999'), 'nope']), 'valid');
    assert.ok(performance.now() - t0 < 1_000);
    assert.equal(checkInput(labels, ['l1', 'nope']), 'invalid', 'small inputs are still checked');
    assert.ok(CHECK_BYTES_BUDGET >= 1e8);
  });

  it('counts every error object a check may make: parts × values, up to CHECK_PARTS_BUDGET', () => {
    // 330 anyOf branches, each a `contains` no item meets: 50,000 numbers made 16 million errors
    // (20 s, 2.6 GB), allErrors or not.
    const branches = compileInputSchema({ anyOf: Array.from({ length: 330 }, () => ({ items: { type: 'number' }, contains: { type: 'string' } })) });
    const t0 = performance.now();
    assert.equal(checkInput(branches, Array(50_000).fill(1)), 'valid');
    assert.ok(performance.now() - t0 < 1_000);
    assert.equal(checkInput(branches, [1]), 'invalid');
    assert.ok(CHECK_PARTS_BUDGET >= 10_000);
  });
});

describe('input with many mistakes', () => {
  it('stops at the first: 20,000 wrong items are one error (four million were a 1.4 GB answer)', () => {
    const v = compileInputSchema({ type: 'object', properties: { xs: { type: 'array', items: { type: 'string' } } } });
    assert.equal(checkInput(v, { xs: Array(20_000).fill(0) }), 'invalid');
    assert.equal(v.errors?.length, 1);
  });
});

describe('EMBERS_PUBLIC_URL', () => {
  it('is unset by default, and kept without a trailing slash', () => {
    assert.equal(loadConfig({}).EMBERS_PUBLIC_URL, undefined);
    assert.equal(loadConfig({ EMBERS_PUBLIC_URL: 'https://embers.example.com/' }).EMBERS_PUBLIC_URL, 'https://embers.example.com');
    assert.equal(loadConfig({ EMBERS_PUBLIC_URL: 'http://10.0.0.5:8080/embers' }).EMBERS_PUBLIC_URL, 'http://10.0.0.5:8080/embers');
  });

  it('must be an http(s) URL other paths can follow', () => {
    for (const bad of ['embers.example.com', 'ftp://embers.example.com', 'https://embers.example.com/?a=1', 'https://embers.example.com/#x']) {
      assert.throws(() => loadConfig({ EMBERS_PUBLIC_URL: bad }), (err: Error) => err instanceof ConfigError && /EMBERS_PUBLIC_URL/.test(err.message), bad);
    }
  });
});
