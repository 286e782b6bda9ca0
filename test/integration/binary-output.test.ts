// Handlers that answer with bytes (binary(), a bare Uint8Array): a sync caller gets the bytes
// themselves with their Content-Type; an async job and a batch line carry them as
// { contentType, base64 }; `embers run --out` saves them. Typed arrays in a JSON answer are
// arrays of numbers, bytes nested in it base64. Real det model, real Redis and S3.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import sharp from 'sharp';
import { ROOT, eventually, fixture, startTestPlatform, textImage, type TestPlatform } from '../helpers/platform.ts';

let p: TestPlatform;
let png: Buffer;
let tmp: string;

before(async () => {
  p = await startTestPlatform({ EMBERS_MAX_ANSWER_BYTES: '1000000' });
  tmp = await mkdtemp(path.join(os.tmpdir(), 'embers-binary-'));
  png = await textImage(['BYTES OUT 42']);
  await p.deploy(fixture('textmap.ts'));
});
after(async () => {
  await p?.close();
  if (tmp) await rm(tmp, { recursive: true, force: true });
});

const run = (body: unknown, headers: Record<string, string> = {}) =>
  p.fetch('/v1/run/textmap', { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });

/** The det map's size for the test image (longer side 320, multiples of 32). */
const MAP = { width: 320, height: 64 };

describe('answers with bytes', () => {
  it('binary() answers with the bytes and their Content-Type; a Uint8Array as application/octet-stream; metered by the bytes sent', async () => {
    const res = await p.fetch('/v1/run/textmap', { method: 'POST', headers: { 'content-type': 'image/png' }, body: new Uint8Array(png) });
    assert.equal(res.status, 200, await res.clone().text());
    assert.equal(res.headers.get('content-type'), 'image/png');
    assert.match(res.headers.get('server-timing') ?? '', /infer;dur=/);
    const map = Buffer.from(await res.arrayBuffer());
    const meta = await sharp(map).metadata();
    assert.deepEqual([meta.format, meta.width, meta.height, meta.channels], ['png', MAP.width, MAP.height, 1]);
    // Text was found: some of the map is bright, most of it dark.
    const { data } = await sharp(map).toColourspace('b-w').raw().toBuffer({ resolveWithObject: true });
    const bright = data.filter((v) => v > 128).length;
    assert.ok(bright > 0 && bright < data.length / 2, `bright pixels: ${bright} of ${data.length}`);

    const raw = await run({ image: png.toString('base64'), format: 'raw' });
    assert.equal(raw.status, 200);
    assert.equal(raw.headers.get('content-type'), 'application/octet-stream');
    const floats = new Float32Array(await raw.arrayBuffer());
    assert.equal(floats.length, MAP.width * MAP.height);
    assert.deepEqual(Uint8Array.from(floats, (f) => Math.round(Math.min(1, Math.max(0, f)) * 255)), new Uint8Array(data.buffer, data.byteOffset, data.length));

    const usage = await eventually(async () => {
      const u = (await (await p.fetch('/v1/usage?function=textmap')).json()) as { data: { requests: number; bytesOut: number }[] };
      return u.data[0]?.requests === 2 && u.data[0];
    }, 'both requests metered');
    assert.equal(usage.bytesOut, map.length + floats.byteLength);
  });

  it('a JSON answer writes a Float32Array as numbers and nested bytes as base64', async () => {
    const [res, bytes] = await Promise.all([run({ image: png.toString('base64'), format: 'json' }), run({ image: png.toString('base64'), format: 'raw' })]);
    assert.equal(res.status, 200);
    assert.equal(res.headers.get('content-type'), 'application/json');
    const out = (await res.json()) as { width: number; height: number; map: number[]; png: string };
    assert.deepEqual([out.width, out.height], [MAP.width, MAP.height]);
    assert.ok(Array.isArray(out.map));
    assert.deepEqual(Float32Array.from(out.map), new Float32Array(await bytes.arrayBuffer()), 'the numbers are the floats, exactly');
    const nested = await sharp(Buffer.from(out.png, 'base64')).metadata();
    assert.deepEqual([nested.format, nested.width], ['png', MAP.width]);
  });

  it('an answer over EMBERS_MAX_ANSWER_BYTES is answered 500 saying so, bytes or JSON', async () => {
    for (const format of ['huge', 'huge-json']) {
      const res = await run({ image: png.toString('base64'), format });
      assert.equal(res.status, 500, format);
      const { error } = (await res.json()) as { error: { code: string; message: string } };
      assert.equal(error.code, 'answer_too_large');
      assert.match(error.message, /textmap answered 1100\d{3} bytes, over the 1000000 this platform passes back \(EMBERS_MAX_ANSWER_BYTES\)/);
    }
  });

  it('an async job and a batch line carry the bytes as { contentType, base64 }', async () => {
    const sync = Buffer.from(await (await run({ image: png.toString('base64') })).arrayBuffer());
    const queued = await run({ image: png.toString('base64') }, { prefer: 'respond-async' });
    assert.equal(queued.status, 202);
    const { id } = (await queued.json()) as { id: string };
    const job = await eventually(async () => {
      const j = (await (await p.fetch(`/v1/jobs/${id}`)).json()) as { status: string; outputType?: string; output?: { contentType: string; base64: string } };
      return j.status === 'succeeded' && j;
    }, 'the async job');
    assert.equal(job.output?.contentType, 'image/png');
    assert.equal(job.outputType, 'image/png');
    assert.deepEqual(Buffer.from(job.output!.base64, 'base64'), sync);
    // The output as a sync run answers it: the bytes, or the JSON; nothing for a failed job.
    const output = await p.fetch(`/v1/jobs/${id}/output`);
    assert.equal(output.headers.get('content-type'), 'image/png');
    assert.deepEqual(Buffer.from(await output.arrayBuffer()), sync);
    const finished = async (body: unknown) => {
      const { id: jobId } = (await (await run(body, { prefer: 'respond-async' })).json()) as { id: string };
      await eventually(async () => ['succeeded', 'failed'].includes(((await (await p.fetch(`/v1/jobs/${jobId}`)).json()) as { status: string }).status), 'the job');
      return p.fetch(`/v1/jobs/${jobId}/output`);
    };
    const asJson = await finished({ image: png.toString('base64'), format: 'json' });
    assert.equal(asJson.headers.get('content-type'), 'application/json');
    assert.equal(((await asJson.json()) as { width: number }).width, MAP.width);
    const failed = await finished({ image: png.toString('base64'), format: 'huge' });
    assert.equal(failed.status, 409);
    assert.match(((await failed.json()) as { error: { message: string } }).error.message, /is failed, so it has no output: textmap answered \d+ bytes/);

    const created = await p.fetch('/v1/batches?function=textmap', { method: 'POST', headers: { 'content-type': 'application/jsonl' }, body: `${JSON.stringify({ custom_id: 'a', input: { image: png.toString('base64') } })}\n` });
    assert.equal(created.status, 201, await created.clone().text());
    const batch = (await created.json()) as { id: string };
    await eventually(async () => ((await (await p.fetch(`/v1/batches/${batch.id}`)).json()) as { status: string }).status === 'completed', 'the batch');
    const [line] = (await (await p.fetch(`/v1/batches/${batch.id}/output`)).text()).split('\n').filter(Boolean).map((l) => JSON.parse(l) as { custom_id: string; output: { contentType: string; base64: string } });
    assert.equal(line.custom_id, 'a');
    assert.equal(line.output.contentType, 'image/png');
    assert.deepEqual(Buffer.from(line.output.base64, 'base64'), sync);
  });

  it('embers run saves the bytes with --out, or writes them to a stdout that is not a terminal', async () => {
    const input = path.join(tmp, 'in.png');
    await writeFile(input, png);
    const cli = (args: string[]) =>
      new Promise<{ code: number; stdout: Buffer; stderr: string }>((resolve) =>
        execFile(process.execPath, [path.join(ROOT, 'cli/bin.mjs'), ...args], { cwd: tmp, encoding: 'buffer', env: { ...process.env, EMBERS_URL: p.url, EMBERS_API_KEY: p.apiKey }, timeout: 60_000 }, (err, stdout, stderr) =>
          resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr: stderr.toString() }),
        ),
      );
    const saved = await cli(['run', 'textmap', '--binary', input, '--out', 'map.png']);
    assert.equal(saved.code, 0, saved.stderr);
    assert.match(saved.stderr, /wrote \d+ bytes of image\/png to map\.png/);
    const file = await readFile(path.join(tmp, 'map.png'));
    assert.equal((await sharp(file).metadata()).width, MAP.width);
    const piped = await cli(['run', 'textmap', '--binary', input]);
    assert.equal(piped.code, 0, piped.stderr);
    assert.deepEqual(piped.stdout, file);
    const json = await cli(['run', 'textmap', '--data', JSON.stringify({ image: png.toString('base64'), format: 'json' }), '--out', 'map.json']);
    assert.equal(json.code, 0, json.stderr);
    assert.equal((JSON.parse(await readFile(path.join(tmp, 'map.json'), 'utf8')) as { width: number }).width, MAP.width);
    // An async job's bytes, saved by `jobs show --out`.
    const queued = await cli(['run', 'textmap', '--binary', input, '--async']);
    assert.equal(queued.code, 0, queued.stderr);
    const shown = await cli(['jobs', 'show', queued.stdout.toString().trim(), '--wait', '--out', 'job.png']);
    assert.equal(shown.code, 0, shown.stderr);
    assert.deepEqual(await readFile(path.join(tmp, 'job.png')), file);
    assert.equal((JSON.parse(shown.stdout.toString()) as { outputType: string; output?: unknown }).outputType, 'image/png');
    // Text that is not JSON comes out as it is, not as a JSON string.
    const csv = await cli(['run', 'textmap', '--data', JSON.stringify({ image: png.toString('base64'), format: 'csv' })]);
    assert.equal(csv.code, 0, csv.stderr);
    assert.equal(csv.stdout.toString(), `width,height\n${MAP.width},${MAP.height}\n`);
    const both = await cli(['run', 'textmap', '--binary', input, '--async', '--out', 'x.png']);
    assert.equal(both.code, 2);
    assert.match(both.stderr, /--out goes with a synchronous run/);
  });
});
