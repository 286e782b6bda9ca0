// The user code's side of an inference request: the tensors of a descriptor's bytes (views where
// the bytes are aligned, no copy), and the response for what the handler gave back, in the
// protocol's JSON or with the binary tensor extension's bytes after it.
import { isTensor, typedArrayOf, type Tensor, type TensorData, type TensorType } from '../../native/tensor.ts';
import { datatypeOf, lengthPrefixed, TENSOR_TYPE, type Datatype } from './datatypes.ts';
import { fromHalfBits } from './fp16.ts';
import { InferenceRequestError, type InferenceDescriptor } from './request.ts';

/** The request's tensors, by input name, over `body` (the descriptor's inputs back to back). */
export function inputTensors(d: InferenceDescriptor, body: Uint8Array): Record<string, Tensor> {
  const out: Record<string, Tensor> = {};
  let at = 0;
  for (const i of d.inputs) {
    const bytes = body.subarray(at, at + i.size);
    at += i.size;
    out[i.name] = { type: TENSOR_TYPE[i.datatype], data: tensorData(i.datatype, bytes), dims: i.shape };
  }
  return out;
}

function tensorData(datatype: Datatype, bytes: Uint8Array): TensorData {
  if (datatype === 'BYTES') {
    const items: Uint8Array[] = [];
    const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    for (let at = 0; at < bytes.length; ) {
      const n = view.getUint32(at, true);
      items.push(bytes.subarray(at + 4, at + 4 + n));
      at += 4 + n;
    }
    return items;
  }
  const Ctor = typedArrayOf(TENSOR_TYPE[datatype])!;
  const width = Ctor.BYTES_PER_ELEMENT;
  // A typed array must start on a multiple of its element size: an unaligned tensor is copied once.
  const aligned = bytes.byteOffset % width === 0 ? bytes : new Uint8Array(bytes);
  return new Ctor(aligned.buffer, aligned.byteOffset, aligned.byteLength / width);
}

/**
 * What a handler returned, as output tensors: a record of tensors as it is (a model's outputs);
 * a typed array is one dimension; a string, number or boolean a one-element tensor; an array of
 * strings or numbers one dimension; anything else a BYTES element holding its JSON. A result
 * that is not a record of fields is one output, `output`.
 */
export function outputTensors(result: unknown): Record<string, Tensor> {
  const fields = typeof result === 'object' && result !== null && !Array.isArray(result) && !ArrayBuffer.isView(result) && !isTensor(result) ? (result as Record<string, unknown>) : { output: result };
  const out: Record<string, Tensor> = {};
  for (const [name, v] of Object.entries(fields)) out[name] = asTensor(v);
  return out;
}

function asTensor(v: unknown): Tensor {
  if (isTensor(v)) return v;
  if (ArrayBuffer.isView(v) && !(v instanceof DataView)) {
    const type = typedTypes.find(([C]) => v instanceof C)?.[1];
    if (type) return { type, data: v as TensorData, dims: [(v as Uint8Array).length] };
  }
  if (typeof v === 'number') return { type: 'float64', data: new Float64Array([v]), dims: [1] };
  if (typeof v === 'boolean') return { type: 'bool', data: new Uint8Array([v ? 1 : 0]), dims: [1] };
  if (typeof v === 'string') return { type: 'string', data: [v], dims: [1] };
  if (Array.isArray(v) && v.length && v.every((x) => typeof x === 'number')) return { type: 'float64', data: Float64Array.from(v as number[]), dims: [v.length] };
  if (Array.isArray(v) && v.length && v.every((x) => typeof x === 'string')) return { type: 'string', data: v as string[], dims: [v.length] };
  return { type: 'string', data: [JSON.stringify(v ?? null)], dims: [1] };
}

const typedTypes: [Function, TensorType][] = [
  [Float32Array, 'float32'], [Float64Array, 'float64'], [Int32Array, 'int32'], [BigInt64Array, 'int64'], [Uint8Array, 'uint8'], [Int8Array, 'int8'],
  [Uint16Array, 'uint16'], [Int16Array, 'int16'], [Uint32Array, 'uint32'], [BigUint64Array, 'uint64'],
];

/** An inference response: its bytes, and the JSON header's length when binary tensors follow it. */
export interface EncodedResponse {
  body: Buffer;
  headerLength?: number;
}

/**
 * The response to `d` from `outputs`: the outputs it asked for (all, in order, when it named
 * none), each as JSON `data` or as binary bytes after the header.
 */
export function encodeResponse(outputs: Record<string, Tensor>, d: InferenceDescriptor, model: { name: string; version: string }): EncodedResponse {
  const wanted = d.outputs ?? Object.keys(outputs).map((name) => ({ name, binary: d.binaryOutputs }));
  const parts: string[] = [];
  const binaries: Buffer[] = [];
  for (const { name, binary } of wanted) {
    const t = outputs[name];
    if (!t) throw new InferenceRequestError(`unexpected inference output '${name}': the model gives ${Object.keys(outputs).map((n) => `'${n}'`).join(', ')}`);
    const datatype = datatypeOf(t.type);
    if (!datatype) throw new Error(`output '${name}' has tensor type ${t.type}, which the protocol has no datatype for`);
    const head = `{"name":${JSON.stringify(name)},"datatype":"${datatype}","shape":[${t.dims.join(',')}]`;
    if (binary) {
      const bytes = binaryBytes(t);
      binaries.push(bytes);
      parts.push(`${head},"parameters":{"binary_data_size":${bytes.length}}}`);
    } else parts.push(`${head},"data":${jsonData(t)}}`);
  }
  const meta = `"model_name":${JSON.stringify(model.name)},"model_version":${JSON.stringify(model.version)}${d.id !== undefined ? `,"id":${JSON.stringify(d.id)}` : ''}`;
  const header = Buffer.from(`{${meta},"outputs":[${parts.join(',')}]}`);
  if (!binaries.length) return { body: header };
  return { body: Buffer.concat([header, ...binaries]), headerLength: header.length };
}

const UTF8 = new TextDecoder();

function binaryBytes(t: Tensor): Buffer {
  if (Array.isArray(t.data)) return lengthPrefixed(t.data as (string | Uint8Array)[]);
  const d = t.data as Exclude<TensorData, string[] | Uint8Array[]>;
  return Buffer.from(d.buffer, d.byteOffset, d.byteLength);
}

/** A tensor's elements as a flat JSON array: 64-bit integers in full (JSON numbers have no bound), FP16 as numbers, BOOL as true/false. */
function jsonData(t: Tensor): string {
  const d = t.data;
  if (Array.isArray(d)) return JSON.stringify((d as (string | Uint8Array)[]).map((s) => (typeof s === 'string' ? s : UTF8.decode(s))));
  if (d instanceof BigInt64Array || d instanceof BigUint64Array) return `[${d.join(',')}]`;
  if (t.type === 'bool') return JSON.stringify(Array.from(d as Uint8Array, (v) => v !== 0));
  if (t.type === 'float16') return JSON.stringify(Array.from(d as Uint16Array, fromHalfBits));
  return JSON.stringify(Array.from(d as Float32Array));
}
