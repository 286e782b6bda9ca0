// A small ONNX model written byte by byte: an Identity per tensor, so a test can run every
// datatype through onnxruntime without a model file of each. ONNX is protobuf; this writes the
// few fields a graph of Identity nodes needs (ir_version 8, opset 13).

const ELEM = { FP32: 1, UINT8: 2, INT8: 3, UINT16: 4, INT16: 5, INT32: 6, INT64: 7, BYTES: 8, BOOL: 9, FP16: 10, FP64: 11, UINT32: 12, UINT64: 13 } as const;

function varint(n: number): Buffer {
  const out: number[] = [];
  while (n > 127) {
    out.push((n & 0x7f) | 0x80);
    n = Math.floor(n / 128);
  }
  out.push(n);
  return Buffer.from(out);
}
const field = (n: number, wire: number) => varint(n * 8 + wire);
const int = (n: number, v: number) => Buffer.concat([field(n, 0), varint(v)]);
const bytes = (n: number, b: Buffer | string) => {
  const data = typeof b === 'string' ? Buffer.from(b) : b;
  return Buffer.concat([field(n, 2), varint(data.length), data]);
};

function valueInfo(name: string, datatype: keyof typeof ELEM, shape: (number | string)[]): Buffer {
  const dims = shape.map((d) => bytes(1, typeof d === 'number' ? int(1, d) : bytes(2, d)));
  const tensor = Buffer.concat([int(1, ELEM[datatype]), bytes(2, Buffer.concat(dims))]);
  return Buffer.concat([bytes(1, name), bytes(2, bytes(1, tensor))]);
}

/** A model whose outputs `<name>_out` are its inputs as they came. */
export function identityModel(tensors: { name: string; datatype: keyof typeof ELEM; shape: (number | string)[] }[]): Buffer {
  const graph = Buffer.concat([
    ...tensors.map((t) => bytes(1, Buffer.concat([bytes(1, t.name), bytes(2, `${t.name}_out`), bytes(3, `id_${t.name}`), bytes(4, 'Identity')]))),
    bytes(2, 'identity'),
    ...tensors.map((t) => bytes(11, valueInfo(t.name, t.datatype, t.shape))),
    ...tensors.map((t) => bytes(12, valueInfo(`${t.name}_out`, t.datatype, t.shape))),
  ]);
  return Buffer.concat([int(1, 8), bytes(2, 'embers-test'), bytes(7, graph), bytes(8, Buffer.concat([bytes(1, ''), int(2, 13)]))]);
}
