// Deploy from source, run over HTTP through BullMQ, batch on onnxruntime: the whole path, real parts.
import assert from 'node:assert/strict';
import http from 'node:http';
import { after, before, describe, it } from 'node:test';
import sharp from 'sharp';
import { decodeReplies, type ReplyHeader } from '../../core/contracts.ts';
import { LiveQueue } from '../../core/live-queue.ts';
import { eventually, fixture, shipped, startTestPlatform, textImage, type TestPlatform } from '../helpers/platform.ts';
import { keys } from '../../core/keys.ts';

let p: TestPlatform;
let helloPng: string;

before(async () => {
  p = await startTestPlatform({ EMBERS_MAX_BODY_BYTES: String(512 * 1024) });
  helloPng = (await textImage(['HELLO EMBERS 2026'])).toString('base64');
  await p.deploy(shipped('echo.ts'));
  await p.deploy(shipped('ocr/index.ts'));
  // Both scale from zero: the first call of each waits for a cold start (tested in elastic.test.ts).
  for (const [name, body] of [['echo', {}], ['ocr', { image: helloPng }]] as const) {
    const res = await p.fetch(`/v1/run/${name}`, { method: 'POST', body: JSON.stringify(body) });
    assert.equal(res.status, 200, `${name} warms up`);
  }
});
after(() => p?.close());

const run = (name: string, body: unknown, headers: Record<string, string> = {}) =>
  p.fetch(`/v1/run/${name}`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: typeof body === 'string' ? body : JSON.stringify(body) });

const squash = (s: string) => s.replace(/\s+/g, '').toUpperCase();

describe('run', () => {
  it('echo returns its input with timing and a request id', async () => {
    const res = await run('echo', { hello: 'embers', n: [1, 2, 3] }, { 'x-request-id': 'test-req-1' });
    assert.equal(res.status, 200);
    assert.deepEqual(await res.json(), { hello: 'embers', n: [1, 2, 3] });
    assert.equal(res.headers.get('x-request-id'), 'test-req-1');
    const timing = res.headers.get('server-timing') ?? '';
    for (const part of ['queue;dur=', 'input;dur=', 'infer;dur=', 'output;dur=0,', 'total;dur=']) assert.ok(timing.includes(part), `Server-Timing has ${part}: ${timing}`);
    assert.ok(!timing.includes('cold'), 'a warm request carries no cold entry');
  });

  it('requests that share an x-request-id each get their own answer', async () => {
    // A caller picks its request id; replies are routed by the gateway's own id, so two callers
    // (two tenants even) that send the same one never get each other's answer.
    const answers = await Promise.all(
      Array.from({ length: 24 }, async (_, i) => {
        const res = await run('echo', { i }, { 'x-request-id': 'shared-id' });
        return { status: res.status, body: (await res.json()) as unknown, rid: res.headers.get('x-request-id') };
      }),
    );
    answers.forEach((a, i) => assert.deepEqual(a, { status: 200, body: { i }, rid: 'shared-id' }));
  });

  it('ocr reads the text of an image rendered from known text', async () => {
    const res = await run('ocr', { image: helloPng });
    assert.equal(res.status, 200, await res.clone().text());
    const { lines } = (await res.json()) as { lines: { text: string; score: number; box: number[][] }[] };
    assert.ok(lines.some((l) => squash(l.text).includes('HELLOEMBERS2026')), `got ${JSON.stringify(lines)}`);
    assert.equal(lines[0].box.length, 4);
    const timing = res.headers.get('server-timing') ?? '';
    assert.match(timing, /infer;dur=(?!0[,\s])[\d.]+/);
    // Decoding and det's input come before the first model call, rec's decoding after the last.
    // One text line: one det and one rec call, one after the other, so the parts cannot overlap.
    const t = Object.fromEntries([...timing.matchAll(/([\w-]+);dur=([\d.]+)/g)].map((m) => [m[1], Number(m[2])]));
    assert.ok(t.input > 0 && t.output > 0, timing);
    assert.ok(t.input + t.batch + t.infer + t.output <= t.handler + 0.05, `the parts fit in the handler's time: ${timing}`);
  });

  it('ocr reads two lines in order, from JPEG and from a data: URL', async () => {
    const png = await textImage(['FIRST LINE 11', 'SECOND LINE 22']);
    const jpeg = (await sharp(png).jpeg({ quality: 90 }).toBuffer()).toString('base64');
    for (const image of [jpeg, `data:image/png;base64,${png.toString('base64')}`]) {
      const res = await run('ocr', { image });
      assert.equal(res.status, 200);
      const texts = ((await res.json()) as { lines: { text: string }[] }).lines.map((l) => squash(l.text));
      const first = texts.findIndex((t) => t.includes('FIRSTLINE11'));
      const second = texts.findIndex((t) => t.includes('SECONDLINE22'));
      assert.ok(first >= 0 && second > first, `got ${JSON.stringify(texts)}`);
    }
  });

  it('ocr takes the image itself as the body (binaryInput), sync and async, reading what the base64 JSON reads', async () => {
    const png = await textImage(['FIRST LINE 11', 'SECOND LINE 22']);
    const jpeg = await sharp(png).jpeg({ quality: 90 }).toBuffer();
    const viaJson = await (await run('ocr', { image: png.toString('base64') })).json();
    for (const [type, bytes] of [['image/png', png], ['image/jpeg; charset=binary', jpeg], ['application/octet-stream', png]] as const) {
      const res = await p.fetch('/v1/run/ocr', { method: 'POST', headers: { 'content-type': type }, body: new Uint8Array(bytes) });
      assert.equal(res.status, 200, await res.clone().text());
      const out = (await res.json()) as { lines: { text: string }[] };
      if (bytes === png) assert.deepEqual(out, viaJson, type);
      else assert.ok(out.lines.some((l) => squash(l.text).includes('SECONDLINE22')), JSON.stringify(out));
    }
    const queued = await p.fetch('/v1/run/ocr', { method: 'POST', headers: { 'content-type': 'image/png', prefer: 'respond-async' }, body: new Uint8Array(png) });
    assert.equal(queued.status, 202);
    const { id } = (await queued.json()) as { id: string };
    const job = await eventually(async () => {
      const j = (await (await p.fetch(`/v1/jobs/${id}`)).json()) as { status: string; output?: unknown; error?: unknown };
      return ['succeeded', 'failed'].includes(j.status) && j;
    }, 'the async binary run to finish');
    assert.equal(job.status, 'succeeded', JSON.stringify(job.error));
    assert.deepEqual(job.output, viaJson);
  });

  it('bytes queued for a field the running version does not take (a rollout) are answered 415, not run on defaults; a damaged entry is answered 500', async () => {
    // As if the bytes were accepted for a version of echo with binaryInput "image", and a version
    // without it became active before a replica took them: queued as the gateway queues them.
    const sub = p.redis().duplicate();
    try {
      const channel = keys.replyChannel('gw-rollout-test');
      const replies = new Map<string, { header: ReplyHeader; body: string }>();
      sub.on('messageBuffer', (_c: Buffer, m: Buffer) => decodeReplies(m).forEach((r) => replies.set(r.header.rid, { header: r.header, body: r.body.toString() })));
      await sub.subscribe(channel);
      const q = new LiveQueue(p.redis());
      const job = (rid: string) => ({ rid, id: `u-${rid}`, gw: 'gw-rollout-test', input: {}, raw: 'image', enq: Date.now(), deadline: Date.now() + 30_000 });
      await q.add('echo', job('rollout-1'), { inputJson: '{}', body: Buffer.from([0x89, 0x50, 0x4e, 0x47]) });
      // And a damaged entry, its body missing: answered too, not dropped.
      await q.add('echo', job('rollout-2'), { inputJson: '{}' });
      await eventually(async () => replies.size === 2, 'both answers');
      const [moved, damaged] = [replies.get('rollout-1')!, replies.get('rollout-2')!];
      assert.equal(moved.header.status, 415);
      assert.match(JSON.parse(moved.body).error.message, /echo version \S+ takes JSON bodies only, and the bytes were sent for "image".*send the request again/);
      assert.equal(damaged.header.status, 500);
      assert.match(JSON.parse(damaged.body).error.message, /body was missing from its queue entry, so it was not run; send it again/);
    } finally {
      sub.disconnect();
    }
  });

  it('concurrent requests share batches, as the replica counts them', async () => {
    const before = await ocrModelStats();
    const results = await Promise.all(Array.from({ length: 24 }, () => run('ocr', { image: helloPng })));
    assert.deepEqual(new Set(results.map((r) => r.status)), new Set([200]));
    for (const r of results) assert.ok(squash(((await r.json()) as { lines: { text: string }[] }).lines.map((l) => l.text).join('')).includes('HELLOEMBERS2026'));
    // The replica publishes its counters with every heartbeat; wait until they cover these requests.
    const after = await eventually(async () => {
      const s = await ocrModelStats();
      return s.det.requests >= before.det.requests + 24 ? s : null;
    }, 'replica counters to include the burst');
    const det = after.det;
    const rec = after.rec;
    assert.ok(Math.max(det.maxCallsPerBatch, rec.maxCallsPerBatch) > 1, `expected a batch with several requests: det ${JSON.stringify(det)} rec ${JSON.stringify(rec)}`);
    assert.ok(det.executions - before.det.executions < 24, 'fewer det executions than requests');
  });

  it('a lone request runs its inferences on every core or a narrow session, as measured cheaper; the replica reports instances and GC', async () => {
    // The inline session loads once the replica goes idle after a lone inference asked for it;
    // later lone requests use it and a narrow session in turn, until each side has three runs past
    // its first SESSION_WARM_RUNS (native/session.ts), which the chooser does not learn from.
    const lone = async () => {
      const res = await run('ocr', { image: helloPng });
      assert.equal(res.status, 200);
      await res.arrayBuffer();
      return ocrModelStats();
    };
    await eventually(async () => {
      const s = await lone();
      return s.det.wide > 0 && s.rec.wide > 0 ? s : null;
    }, 'lone requests to run wide');
    // Read from the replica's record, written on a heartbeat: send lone requests until it shows both sides measured.
    const stats = await eventually(async () => {
      const s = await lone();
      return [s.det, s.rec].every((m) => m.lone && typeof m.lone.wide === 'number' && typeof m.lone.narrow === 'number' && m.lone.wide > 0 && m.lone.narrow > 0) ? s : null;
    }, 'both sides of the lone choice to be measured');
    for (const m of [stats.det, stats.rec]) {
      assert.ok(m.lone && ['wide', 'narrow'].includes(m.lone.choice), `a choice: ${JSON.stringify(m.lone)}`);
      assert.ok(typeof m.lone.wide === 'number' && typeof m.lone.narrow === 'number' && m.lone.wide > 0 && m.lone.narrow > 0, `both sides measured: ${JSON.stringify(m.lone)}`);
    }
    assert.ok(stats.det.instances >= 1);
    const fn = (await (await p.fetch('/v1/functions/ocr')).json()) as { replicas: { state: string; gc?: { count: number; ms: number } }[] };
    assert.ok(fn.replicas.some((r) => r.state === 'ready' && r.gc && r.gc.count >= 0), 'GC pauses are reported');
  });
});

type ModelStats = { requests: number; executions: number; maxCallsPerBatch: number; instances: number; wide: number; lone?: { choice: string; wide: number | null; narrow: number | null } };

async function ocrModelStats() {
  const res = await p.fetch('/v1/functions/ocr');
  const fn = (await res.json()) as { replicas: { state: string; models: Record<string, ModelStats> }[] };
  const r = fn.replicas.find((x) => x.state === 'ready');
  assert.ok(r, 'a ready ocr replica');
  return r.models as { det: ModelStats; rec: ModelStats };
}

describe('bad input gets a clear 4xx and the JSON error contract', () => {
  const cases: [string, () => Promise<Response>, number, string][] = [
    ['malformed JSON', () => run('echo', '{"unterminated'), 400, 'invalid_json'],
    ['empty body', () => run('echo', ''), 400, 'invalid_json'],
    ['fields that fail the schema', () => run('ocr', { picture: 'x' }), 400, 'invalid_input'],
    ['wrong type', () => run('ocr', { image: 42 }), 400, 'invalid_input'],
    ['base64 that is not an image', () => run('ocr', { image: Buffer.from('definitely not a png').toString('base64') }), 400, 'invalid_input'],
    ['a binary body that is not an image', () => run('ocr', 'definitely not a png', { 'content-type': 'image/png' }), 400, 'invalid_input'],
    ['an empty binary body', () => run('ocr', '', { 'content-type': 'image/png' }), 400, 'invalid_input'],
    ['a binary body to a function that takes JSON only', () => run('echo', 'GIF89a', { 'content-type': 'image/gif' }), 415, 'unsupported_media_type'],
    ['a multipart form to a function that takes bytes', () => run('ocr', '--x\r\n\r\n--x--', { 'content-type': 'multipart/form-data; boundary=x' }), 415, 'unsupported_media_type'],
    ['bytes without a Content-Type of their own (curl -d)', () => run('ocr', 'GIF89a', { 'content-type': 'application/x-www-form-urlencoded' }), 400, 'invalid_json'],
    ['a body over the limit', () => run('echo', { blob: 'x'.repeat(600 * 1024) }), 413, 'too_large'],
    ['an unknown function', () => run('no-such-fn', {}), 404, 'function_not_found'],
    ['a function name that could escape its key space', () => run('..%2F..%2Fetc', {}), 404, 'function_not_found'],
    ['no API key', () => fetch(`${p.url}/v1/run/echo`, { method: 'POST', body: '{}' }), 401, 'unauthorized'],
    ['a wrong API key', () => fetch(`${p.url}/v1/run/echo`, { method: 'POST', body: '{}', headers: { authorization: 'Bearer nope' } }), 401, 'unauthorized'],
    ['an unknown route', () => p.fetch('/v1/nothing-here'), 404, 'not_found'],
  ];
  for (const [what, call, status, code] of cases) {
    it(what, async () => {
      const res = await call();
      assert.equal(res.status, status);
      const body = (await res.json()) as { error: { code: string; message: string } };
      assert.equal(body.error.code, code);
      assert.ok(body.error.message.length > 10, `a message a person can act on: ${body.error.message}`);
      assert.ok(res.headers.get('x-request-id'));
    });
  }

  it('bodies sent with their headers, streamed, chunked or empty read alike on one kept-alive connection', async () => {
    // node:http writes a small body in the same write as its headers: the gateway takes it from
    // the parser's buffer at once (readJsonText); a large one streams in, a chunked one declares no length.
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    const url = new URL(p.url);
    const post = (body: string, headers: Record<string, string | number>) =>
      new Promise<{ status: number; text: string; reused: boolean }>((resolve, reject) => {
        const req = http.request({ host: url.hostname, port: url.port, method: 'POST', path: '/v1/run/echo', agent, headers: { authorization: `Bearer ${p.apiKey}`, 'content-type': 'application/json', ...headers } }, (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString('utf8'), reused: req.reusedSocket }));
        });
        req.on('error', reject);
        if (headers['transfer-encoding']) {
          req.write(body.slice(0, 5));
          setTimeout(() => req.end(body.slice(5)), 20);
        } else req.end(body);
      });
    try {
      const small = JSON.stringify({ small: 'ünïcode ✓' });
      const withBom = `\uFEFF${small}`;
      const large = JSON.stringify({ large: 'y'.repeat(300 * 1024) });
      const chunked = JSON.stringify({ chunked: true });
      const answers = [
        await post(small, { 'content-length': Buffer.byteLength(small) }),
        await post(large, { 'content-length': Buffer.byteLength(large) }),
        await post(chunked, { 'transfer-encoding': 'chunked' }),
        await post('', { 'content-length': 0 }),
        await post('{"not', { 'content-length': 5 }),
        await post(small, { 'content-length': Buffer.byteLength(small) }),
        await post(withBom, { 'content-length': Buffer.byteLength(withBom) }),
      ];
      assert.deepEqual(answers.map((a) => a.status), [200, 200, 200, 400, 400, 200, 200]);
      assert.deepEqual(JSON.parse(answers[0].text), { small: 'ünïcode ✓' });
      assert.equal(answers[1].text, large);
      assert.deepEqual(JSON.parse(answers[2].text), { chunked: true });
      assert.match(answers[3].text, /request body is empty/);
      assert.match(answers[4].text, /not valid JSON/);
      assert.equal(answers[5].text, answers[0].text);
      assert.equal(answers[6].text, answers[0].text, 'a byte order mark is dropped, as for a streamed body');
      assert.ok(answers.slice(1).every((a) => a.reused), 'every request after the first reused the connection');
    } finally {
      agent.destroy();
    }
  });

  it('a model upload that declares more than the limit is refused before any of it is read', async () => {
    const url = new URL(p.url);
    const answer = await new Promise<{ status: number; text: string }>((resolve, reject) => {
      const req = http.request(
        { host: url.hostname, port: url.port, method: 'PUT', path: `/v1/models/sha256/${'a'.repeat(64)}`, headers: { authorization: `Bearer ${p.apiKey}`, 'content-length': 20_000_000_000 } },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('end', () => {
            resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString('utf8') });
            req.destroy();
          });
        },
      );
      req.on('error', reject);
      req.write(Buffer.alloc(1024));
    });
    assert.equal(answer.status, 413);
    assert.match(answer.text, /model is 20000000000 bytes, over/);
  });

  it('the gateway keeps serving after all of that', async () => {
    const res = await run('echo', { still: 'here' });
    assert.equal(res.status, 200);
  });
});

describe('deploy and manage', () => {
  it('lists functions and shows versions, replicas and cold-start phases', async () => {
    const list = (await (await p.fetch('/v1/functions')).json()) as { functions: { name: string; active: string }[] };
    assert.deepEqual(list.functions.map((f) => f.name), ['echo', 'ocr']);
    const fn = (await (await p.fetch('/v1/functions/ocr')).json()) as { active: string; manifest: { models: Record<string, string> }; replicas: { state: string; coldStart: Record<string, number> }[] };
    assert.match(fn.manifest.models.det, /^s3:\/\/embers\/models\/sha256\/[0-9a-f]{64}\.onnx$/);
    const replica = fn.replicas.find((r) => r.state === 'ready')!;
    for (const phase of ['spawnMs', 'bundleMs', 'modelFetchMs', 'modelLoadMs', 'setupMs', 'totalMs']) assert.ok(replica.coldStart[phase] >= 0, phase);
  });

  it('redeploying the same source is idempotent; models are not uploaded twice', async () => {
    const again = await p.deploy(shipped('ocr/index.ts'));
    assert.equal(again.unchanged, true);
    assert.equal(again.version, 'v1');
  });

  it('a function without an input schema deploys and takes any JSON', async () => {
    await p.deploy(fixture('minimal.ts'));
    for (const body of ['{"a":[1,2]}', '"text"', '7', 'null']) {
      const res = await p.fetch('/v1/run/minimal', { method: 'POST', headers: { 'content-type': 'application/json' }, body });
      assert.equal(res.status, 200, body);
      assert.deepEqual(await res.json(), { got: JSON.parse(body) });
    }
  });

  it('rejects an invalid deploy with 400 and says why', async () => {
    const res = await p.fetch('/v1/functions', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ spec: { name: 'Bad Name!', inputSchema: {} }, bundle: 'eA==' }) });
    assert.equal(res.status, 400);
    const body = (await res.json()) as { error: { code: string; message: string } };
    assert.equal(body.error.code, 'invalid_deploy');
    assert.match(body.error.message, /lower-case/);
    const missing = await p.fetch('/v1/functions', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ spec: { name: 'ghost', inputSchema: {}, models: { m: 's3://embers/models/none.onnx' } }, bundle: 'eA==' }),
    });
    assert.equal(missing.status, 400);
    assert.equal(((await missing.json()) as { error: { code: string } }).error.code, 'model_not_found');
    // Each of these used to deploy (201), then fail every run or every replica start.
    const deploy = async (spec: Record<string, unknown>, bundle = 'eA==') => {
      const res = await p.fetch('/v1/functions', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ spec: { name: 'bad', inputSchema: {}, ...spec }, bundle }) });
      return { status: res.status, error: ((await res.json()) as { error?: { code: string; message: string } }).error };
    };
    const schema = await deploy({ inputSchema: { type: 'nonsense' } });
    assert.equal(schema.status, 400);
    assert.match(schema.error!.message, /inputSchema is not a valid JSON Schema/);
    assert.match((await deploy({ inputSchema: { type: 'string', pattern: '(' } })).error!.message, /Invalid regular expression/);
    const notBase64 = await deploy({}, 'export default { name: "bad" }');
    assert.equal(notBase64.status, 400);
    assert.match(notBase64.error!.message, /bundle must be .* base64/);
    const scaling = await deploy({ scaling: { minReplicas: 3, maxReplicas: 1 } });
    assert.equal(scaling.status, 400);
    assert.match(scaling.error!.message, /minReplicas must not be above scaling\.maxReplicas/);
    assert.equal((await p.fetch('/v1/functions/bad')).status, 404, 'nothing was deployed');
  });

  it('health, readiness and metrics', async () => {
    assert.equal((await fetch(`${p.url}/healthz`)).status, 200);
    const ready = await fetch(`${p.url}/readyz`);
    const body = (await ready.json()) as { sandbox: { nodes: { isolates: boolean; missing: string[] }[] } };
    assert.deepEqual({ ...body, sandbox: undefined }, { ok: true, redis: 'ok', s3: 'ok', replies: 'ok', sandbox: undefined });
    // Each node says whether it isolates user code, and what it cannot enforce.
    assert.equal(body.sandbox.nodes.length, 1);
    assert.equal(typeof body.sandbox.nodes[0].isolates, 'boolean');
    assert.ok(Array.isArray(body.sandbox.nodes[0].missing));
    const metrics = await (await fetch(`${p.url}/metrics`, { headers: { authorization: `Bearer ${p.adminKey}` } })).text();
    assert.match(metrics, /embers_requests_total\{function="echo",status="200"\} \d+/);
  });
});
