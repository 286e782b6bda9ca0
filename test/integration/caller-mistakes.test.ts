// Issue 28, "no 5xx for a caller's mistake": what an attacker sent that was answered 500 (or that
// stalled a batch) is now a 4xx that says what to change. Real Redis, S3, gateway and replicas.
import assert from 'node:assert/strict';
import http from 'node:http';
import net from 'node:net';
import { after, before, describe, it } from 'node:test';
import { bundleFunction } from '../../cli/deploy.ts';
import { eventually, fixture, shipped, startTestPlatform, type TestPlatform } from '../helpers/platform.ts';

const PUBLIC = 'https://embers.example.com/base';
let p: TestPlatform;

before(async () => {
  p = await startTestPlatform({ EMBERS_PUBLIC_URL: `${PUBLIC}/`, EMBERS_SCHEDULER_TICK_MS: '100' });
  await p.deploy(shipped('echo.ts'));
  await p.deploy(fixture('tree.ts'));
});
after(() => p?.close());

interface ErrorBody {
  error: { code: string; message: string };
}
const nested = (n: number) => `${'['.repeat(n)}${']'.repeat(n)}`;
const post = (route: string, body: string, headers: Record<string, string> = {}) => p.fetch(route, { method: 'POST', body, headers: { 'content-type': 'application/json', ...headers } });
const errorOf = async (res: Response, status: number): Promise<ErrorBody['error']> => {
  const text = await res.text();
  assert.equal(res.status, status, text);
  return (JSON.parse(text) as ErrorBody).error;
};

/** A request through node:http, which sends the Host header it is given (fetch will not). */
function rawRequest(method: string, route: string, body: string, headers: Record<string, string>): Promise<{ status: number; headers: http.IncomingHttpHeaders; body: string }> {
  const u = new URL(p.url);
  return new Promise((resolve, reject) => {
    const req = http.request({ host: u.hostname, port: u.port, method, path: route, headers: { authorization: `Bearer ${p.apiKey}`, 'content-type': 'application/json', 'content-length': Buffer.byteLength(body), ...headers } }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body: Buffer.concat(chunks).toString() }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

describe('JSON nested past EMBERS_MAX_JSON_DEPTH (128)', () => {
  it('is a 400 too_deep on every route that reads JSON, naming the limit', async () => {
    const deep = nested(5000);
    const answers = [
      await post('/v1/run/echo', deep),
      await post('/v1/run/echo', deep, { prefer: 'respond-async' }),
      await post('/v1/functions', `{"spec":${deep}}`),
      await post('/v1/batches', `{"function":"echo","input_uri":${deep}}`),
      await post('/v1/tenants', deep, { authorization: `Bearer ${p.adminKey}` }),
    ];
    for (const res of answers) {
      const error = await errorOf(res, 400);
      assert.equal(error.code, 'too_deep');
      assert.match(error.message, /more than 128 levels deep.*\(EMBERS_MAX_JSON_DEPTH\)/);
    }
  });

  it('leaves JSON at the limit alone: echo answers it as it came', async () => {
    const res = await post('/v1/run/echo', nested(128));
    assert.equal(res.status, 200);
    assert.equal(await res.text(), nested(128));
  });

  it('keeps input for a recursive schema within what its validator can walk', async () => {
    const ok = await post('/v1/run/tree', `{"tree":${nested(100)}}`);
    assert.equal(ok.status, 200);
    assert.deepEqual(await ok.json(), { depth: 100 });
    assert.equal((await errorOf(await post('/v1/run/tree', `{"tree":${nested(20_000)}}`), 400)).code, 'too_deep');
  });
});

describe('deploying a pathological input schema', () => {
  const deploy = async (inputSchema: unknown, name = 'pathological') => {
    const bundle = (await bundleFunction(shipped('echo.ts'))).toString('base64');
    return post('/v1/functions', JSON.stringify({ spec: { name, inputSchema }, bundle }));
  };

  it('is a 400 when it is huge, before any compile stalls the gateway', async () => {
    const properties = Object.fromEntries(Array.from({ length: 5000 }, (_, i) => [`p${i}`, { type: 'string', pattern: `^a${i}$` }]));
    const error = await errorOf(await deploy({ type: 'object', properties }), 400);
    assert.equal(error.code, 'invalid_deploy');
    assert.match(error.message, /spec\.inputSchema has more than 1000 objects and arrays/);
    assert.match((await errorOf(await deploy({ enum: ['x'.repeat(300 * 1024)] }), 400)).message, /bytes as JSON, over 262144/);
  });

  it('is a 400 when it nests past the limit', async () => {
    let schema: unknown = { type: 'string' };
    for (let i = 0; i < 200; i++) schema = { type: 'object', properties: { a: schema } };
    assert.equal((await errorOf(await deploy(schema), 400)).code, 'too_deep');
    assert.equal((await post('/v1/run/echo', '{"still":"serving"}')).status, 200);
  });

  it('never stalls the gateway: millions of mistakes are one error; references and uniqueItems are left to the replica', async () => {
    // With every error collected, 8 MB of wrong-typed items cost the gateway 1.4 GB and 17 s,
    // and the answer (every error in details) was past V8's longest string: a 500.
    assert.equal((await deploy({ type: 'object', properties: { xs: { type: 'array', items: { type: 'string' } } } }, 'strings')).status, 201);
    const many = await post('/v1/run/strings', `{"xs":[${Array(20_000).fill('0').join(',')}]}`);
    const text = await many.text();
    assert.equal(many.status, 400, text.slice(0, 300));
    const { error } = JSON.parse(text) as { error: ErrorBody['error'] & { details: unknown[] } };
    assert.equal(error.code, 'invalid_input');
    assert.deepEqual([error.details.length, error.message], [1, 'input does not match the schema of strings: /xs/0 must be string']);
    // Past what the gateway checks for this schema (input the size of its parts allows), the
    // replica judges: echo's own zod takes anything.
    const big = `{"xs":[${Array(4_000_000).fill('0').join(',')}]}`;
    const passed = await post('/v1/run/strings', big);
    assert.equal(passed.status, 200);
    assert.equal((await passed.text()).length, big.length);

    // Two anyOf branches that refer back double the check at every level the input nests (28
    // levels: minutes of the gateway's event loop), and uniqueItems compares every pair of items
    // (25,000: 28 s). A hostile tenant's schema must stall no one: the replica judges these.
    const doubling = { anyOf: [{ type: 'array', items: { $ref: '#/$defs/x' }, minItems: 2 }, { type: 'array', items: { $ref: '#/$defs/x' } }] };
    const schema = { type: 'object', properties: { tree: { $ref: '#/$defs/x' }, set: { type: 'array', uniqueItems: true } }, $defs: { x: doubling } };
    assert.equal((await deploy(schema, 'hostile-schema')).status, 201);
    const input = JSON.stringify({ tree: JSON.parse(nested(28)), set: Array.from({ length: 25_000 }, (_, i) => ({ i })) });
    const res = await p.fetch('/v1/run/hostile-schema', { method: 'POST', body: input, headers: { 'content-type': 'application/json' }, signal: AbortSignal.timeout(30_000) });
    assert.equal(res.status, 200);
    assert.equal(await res.text(), input);
    assert.equal((await post('/v1/run/echo', '{"still":"serving"}')).status, 200);
    // Their idle replicas would hold this node's few slots: make room for the next ones.
    for (const name of ['strings', 'hostile-schema']) assert.equal((await p.fetch(`/v1/functions/${name}`, { method: 'DELETE' })).status, 200);
  });

  it('checks at the gateway only as much input as its schema makes cheap; the rest is the replica\'s', async () => {
    // An enum of 20,000 labels (169 KB, within the deploy limits) compared with every item: 200,000
    // items were 20 s of the gateway's event loop before the last one was found wrong; 330 anyOf
    // branches, each a `contains` no item meets, over 50,000 numbers: 20 s and 2.6 GB of errors.
    const labels = Array.from({ length: 20_000 }, (_, i) => `l${i}`);
    assert.equal((await deploy({ type: 'array', items: { enum: labels } }, 'labels')).status, 201);
    const small = await errorOf(await post('/v1/run/labels', '["l1","nope"]'), 400);
    assert.equal(small.message, 'input does not match the schema of labels: /1 must be equal to one of the allowed values');
    // Past the budget the gateway passes it on: echo's own zod takes anything, so it is answered.
    const input = JSON.stringify([...Array(200_000).fill('l19999'), 'nope']);
    const res = await p.fetch('/v1/run/labels', { method: 'POST', body: input, headers: { 'content-type': 'application/json' }, signal: AbortSignal.timeout(15_000) });
    assert.equal(res.status, 200);
    assert.equal((await res.text()).length, input.length);
    assert.equal((await p.fetch('/v1/functions/labels', { method: 'DELETE' })).status, 200);
    const branches = { anyOf: Array.from({ length: 330 }, () => ({ items: { type: 'number' }, contains: { type: 'string' } })) };
    assert.equal((await deploy(branches, 'branches')).status, 201);
    assert.equal((await errorOf(await post('/v1/run/branches', '[1]'), 400)).code, 'invalid_input');
    const numbers = JSON.stringify(Array(50_000).fill(1));
    const wide = await p.fetch('/v1/run/branches', { method: 'POST', body: numbers, headers: { 'content-type': 'application/json' }, signal: AbortSignal.timeout(15_000) });
    assert.equal(wide.status, 200);
    assert.equal((await p.fetch('/v1/functions/branches', { method: 'DELETE' })).status, 200);
  });
});

describe('ids checked by format', () => {
  const unknownJob = (id: string) => `no job ${id}; async runs answer 202 with their id (POST /v1/run/:name with "Prefer: respond-async")`;

  it('a finished job\'s tombstone key (<id>:gone) and other malformed ids are answered as unknown jobs', async () => {
    const { id } = (await (await post('/v1/run/echo', '{"a":1}', { prefer: 'respond-async' })).json()) as { id: string };
    await eventually(async () => ((await (await p.fetch(`/v1/jobs/${id}`)).json()) as { status: string }).status === 'succeeded', 'the job to succeed');
    for (const bad of [`${id}:gone`, `${id}x`, 'job_%E0%A4%A', 'x'.repeat(500)]) {
      for (const [method, route] of [['GET', `/v1/jobs/${bad}`], ['GET', `/v1/jobs/${bad}/output`], ['DELETE', `/v1/jobs/${bad}`]]) {
        const error = await errorOf(await p.fetch(route, { method }), 404);
        assert.deepEqual(error, { code: 'job_not_found', message: unknownJob(decodeURIComponent(bad.replace('%E0%A4%A', '%25E0%25A4%25A'))) });
      }
    }
    // A well-formed id that was never made gets the same answer.
    assert.deepEqual(await errorOf(await p.fetch('/v1/jobs/job_AAAAAAAAAAAAAAAA'), 404), { code: 'job_not_found', message: unknownJob('job_AAAAAAAAAAAAAAAA') });
  });

  it('a batch id that names its results hash, or any malformed one, is answered as an unknown batch', async () => {
    const created = await post('/v1/batches?function=echo', '{"custom_id":"a","input":1}\n', { 'content-type': 'application/jsonl' });
    const { id } = (await created.json()) as { id: string };
    for (const [method, route] of [['GET', `/v1/batches/${id}:results`], ['GET', `/v1/batches/${id}:results/output`], ['POST', `/v1/batches/${id}.1/cancel`]]) {
      const error = await errorOf(await p.fetch(route, { method }), 404);
      assert.equal(error.code, 'batch_not_found');
    }
  });
});

describe('a batch whose every line is costly to check', () => {
  it('is checked at the feeder for a bounded time; the replicas judge the rest', async () => {
    // Each line within the gateway's budget, but 600 of them (126 KB) were 30 s of the leading
    // scheduler's event loop, and the gateway beside it stalled 1.4 s at a time.
    const bundle = (await bundleFunction(shipped('echo.ts'))).toString('base64');
    const inputSchema = { anyOf: Array.from({ length: 330 }, () => ({ items: { type: 'number' }, contains: { type: 'string' } })) };
    assert.equal((await post('/v1/functions', JSON.stringify({ spec: { name: 'costly', inputSchema }, bundle }))).status, 201);
    const lines = Array.from({ length: 3000 }, (_, i) => JSON.stringify({ custom_id: `c${i}`, input: Array(90).fill(1) }));
    const created = await post('/v1/batches?function=costly', lines.join('\n'), { 'content-type': 'application/jsonl' });
    assert.equal(created.status, 201);
    const { id } = (await created.json()) as { id: string };
    const validated = await eventually(async () => {
      const b = (await (await p.fetch(`/v1/batches/${id}`)).json()) as { status: string; request_counts: { total: number; failed: number } };
      return b.status !== 'validating' ? b : null;
    }, `batch ${id} to be validated`, 60_000);
    assert.equal(validated.status, 'in_progress');
    assert.equal(validated.request_counts.total, 3000);
    assert.ok(validated.request_counts.failed > 0 && validated.request_counts.failed < 3000, `the feeder stopped checking: ${validated.request_counts.failed} lines refused there`);
    assert.equal((await post('/v1/run/echo', '{"still":"serving"}')).status, 200);
    assert.equal((await p.fetch(`/v1/batches/${id}/cancel`, { method: 'POST' })).status, 200);
    await eventually(async () => ((await (await p.fetch(`/v1/batches/${id}`)).json()) as { status: string }).status === 'cancelled', 'the batch to be cancelled', 60_000);
    assert.equal((await p.fetch('/v1/functions/costly?force=true', { method: 'DELETE' })).status, 200);
  });
});

describe('a batch line that cannot be queued', () => {
  it('fails alone with its line number, and the rest of the batch runs', async () => {
    const lines = [`{"custom_id":"deep","input":${nested(5000)}}`, ...[1, 2, 3].map((i) => JSON.stringify({ custom_id: `ok${i}`, input: { i } }))];
    const created = await post('/v1/batches?function=echo', `${lines.join('\n')}\n`, { 'content-type': 'application/jsonl' });
    assert.equal(created.status, 201);
    const { id } = (await created.json()) as { id: string };
    const done = await eventually(async () => {
      const b = (await (await p.fetch(`/v1/batches/${id}`)).json()) as { status: string; request_counts: { total: number; completed: number; failed: number } };
      return ['completed', 'failed', 'cancelled'].includes(b.status) ? b : null;
    }, `batch ${id} to finish`, 60_000);
    assert.equal(done.status, 'completed');
    assert.deepEqual(done.request_counts, { total: 4, completed: 3, failed: 1 });
    const errors = (await (await p.fetch(`/v1/batches/${id}/errors`)).text()).trim().split('\n').map((l) => JSON.parse(l));
    assert.equal(errors.length, 1);
    assert.equal(errors[0].custom_id, 'deep');
    assert.equal(errors[0].line, 1);
    assert.equal(errors[0].error.code, 'too_deep');
    const output = (await (await p.fetch(`/v1/batches/${id}/output`)).text()).trim().split('\n').map((l) => JSON.parse(l));
    assert.deepEqual(output.map((o) => o.custom_id).sort(), ['ok1', 'ok2', 'ok3']);
  });
});

describe('a webhook URL with a user or password', () => {
  it('is a 400 when the run is sent, not six failed deliveries after it was accepted', async () => {
    for (const url of ['http://user:pass@127.0.0.1:1/hook', 'https://token@example.com/hook']) {
      for (const [route, headers] of [[`/v1/run/echo?webhook=${encodeURIComponent(url)}`, {}], ['/v1/run/echo', { 'embers-webhook': url }]] as const) {
        const error = await errorOf(await post(route, '{}', { prefer: 'respond-async', ...headers }), 400);
        assert.equal(error.code, 'invalid_webhook');
        assert.match(error.message, /cannot carry a user or password/);
        assert.ok(!error.message.includes(url), 'the credentials are not echoed');
      }
    }
  });
});

describe('a webhook to this machine or a private network', () => {
  it('is a 400 when the run is sent: webhooks carry tenants\' output and go to public addresses only', async () => {
    for (const url of ['http://127.0.0.1:6379/x', 'http://localhost:8787/v1/tenants', 'http://169.254.169.254/latest/meta-data/', 'http://10.1.2.3/hook', 'http://[::1]:9000/hook', 'http://[::ffff:192.168.0.1]/hook']) {
      const error = await errorOf(await post(`/v1/run/echo?webhook=${encodeURIComponent(url)}`, '{}', { prefer: 'respond-async' }), 400);
      assert.equal(error.code, 'invalid_webhook');
      assert.match(error.message, /EMBERS_WEBHOOK_ALLOW_PRIVATE/);
    }
  });
});

describe('a request that is not valid HTTP', () => {
  /** Bytes as they are, over a socket of their own; the answer's status and body. */
  const sendRaw = (bytes: string) =>
    new Promise<{ status: number; type: string; body: string }>((resolve, reject) => {
      const u = new URL(p.url);
      const socket = net.connect({ host: u.hostname, port: Number(u.port) }, () => socket.write(bytes));
      let got = '';
      socket.on('data', (d) => (got += d));
      socket.on('error', reject);
      socket.on('close', () => {
        const [head, body = ''] = got.split('\r\n\r\n');
        resolve({ status: Number(head.split(' ')[1]), type: /content-type: ([^\r]+)/i.exec(head)?.[1] ?? '', body });
      });
    });

  it("is answered in the API's error shape, with Node's status", async () => {
    const cases: [string, number, string][] = [
      ['POST /v1/run/echo HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n{}', 400, 'bad_request'],
      ['POST /v1/run/echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n', 400, 'bad_request'],
      ['get /v1/functions HTTP/1.1\r\nHost: x\r\n\r\n', 400, 'bad_request'],
      [`GET /v1/functions HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(70_000)}\r\n\r\n`, 431, 'headers_too_large'],
    ];
    for (const [bytes, status, code] of cases) {
      const res = await sendRaw(bytes);
      assert.equal(res.status, status, bytes.slice(0, 60));
      assert.equal(res.type, 'application/json');
      const { error } = JSON.parse(res.body) as ErrorBody;
      assert.equal(error.code, code);
      assert.match(error.message, /^the request could not be read: /);
    }
    assert.equal((await post('/v1/run/echo', '{"still":"serving"}')).status, 200);
  });
});

describe('absolute URLs', () => {
  it('come from EMBERS_PUBLIC_URL, never from the Host header the caller sent', async () => {
    const res = await rawRequest('POST', '/v1/run/echo', '{"a":1}', { prefer: 'respond-async', host: 'evil.example' });
    assert.equal(res.status, 202, res.body);
    const { id, url } = JSON.parse(res.body) as { id: string; url: string };
    assert.equal(url, `${PUBLIC}/v1/jobs/${id}`);
    assert.equal(res.headers.location, url);
    const job = await rawRequest('GET', `/v1/jobs/${id}`, '', { host: 'evil.example' });
    assert.equal((JSON.parse(job.body) as { url: string }).url, url);

    const batch = await rawRequest('POST', '/v1/batches?function=echo', '{"custom_id":"a","input":1}\n', { host: 'evil.example', 'content-type': 'application/jsonl' });
    assert.equal(batch.status, 201, batch.body);
    const b = JSON.parse(batch.body) as { id: string; urls: { self: string; output: string; errors: string } };
    assert.deepEqual(b.urls, { self: `${PUBLIC}/v1/batches/${b.id}`, output: `${PUBLIC}/v1/batches/${b.id}/output`, errors: `${PUBLIC}/v1/batches/${b.id}/errors` });
    assert.equal(batch.headers.location, b.urls.self);

    const fn = await rawRequest('GET', '/v1/functions/echo', '', { host: 'evil.example' });
    assert.equal((JSON.parse(fn.body) as { endpoint: string }).endpoint, `${PUBLIC}/v1/run/echo`);
  });
});
