// An Open Inference Protocol infer request, as the gateway reads it: the JSON header checked
// against the protocol and the model's tensors, JSON `data` turned into the bytes the binary
// tensor extension would have sent, so a replica gets one layout whatever the caller used.
// A request of binary tensors alone is queued as it came, without a copy.
import { nestsDeeperThan } from '../json-depth.ts';
import { elementCount } from '../../native/tensor.ts';
import { DATATYPES, elementBytes, lengthPrefixed, shapeFits, type Datatype, type TensorSignature } from './datatypes.ts';
import { toHalfBits } from './fp16.ts';

/** The protocol's refusal of a request: answered 400 with `{ "error": message }`. */
export class InferenceRequestError extends Error {
  override name = 'InferenceRequestError';
}

export type Parameters = Record<string, string | number | boolean>;

/** What a replica gets as the input of an inference request; the tensors' bytes come beside it. */
export interface InferenceDescriptor {
  id?: string;
  parameters?: Parameters;
  /** In order; each one's bytes follow the one before's in the body. */
  inputs: { name: string; datatype: Datatype; shape: number[]; size: number; parameters?: Parameters }[];
  /** The outputs asked for, each as binary or JSON; absent: all of them. */
  outputs?: { name: string; binary: boolean }[];
  /** Binary for outputs not named (the request's `binary_data_output`). */
  binaryOutputs: boolean;
  /** The body, put here by the replica (RunJobData.raw names this field). */
  data?: Uint8Array;
}

/** The body field RunJobData.raw names for an inference request. */
export const TENSOR_BYTES_FIELD = 'data';

const fail = (message: string): never => {
  throw new InferenceRequestError(message);
};

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** An object's fields with nulls left out: clients that write every optional field (`"parameters": null`) mean it absent. */
const present = (o: Record<string, unknown>): Record<string, unknown> => {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(o)) if (v !== null) out[k] = v;
  return out;
};

/** `$parameters`: an object of strings, numbers and booleans. */
function parametersOf(v: unknown, where: string): Parameters | undefined {
  if (v === undefined) return undefined;
  if (!isObject(v)) return fail(`${where}parameters must be an object`);
  for (const [k, p] of Object.entries(v)) if (typeof p !== 'string' && typeof p !== 'number' && typeof p !== 'boolean') fail(`${where}parameter '${k}' must be a string, number or boolean`);
  return v as Parameters;
}

/**
 * Reads the JSON header (already parsed) and the binary tail after it. `signature`: the model's
 * tensors; an input it does not name, one it needs and did not get, or a datatype or shape that
 * does not fit is refused. Returns the descriptor and the tensors' bytes, back to back.
 */
export function readInferenceRequest(header: unknown, tail: Buffer, signature: TensorSignature, maxDepth: number): { descriptor: InferenceDescriptor; body: Buffer } {
  if (!isObject(header)) fail('the inference request must be a JSON object with "inputs"');
  const h = present(header as Record<string, unknown>);
  if (nestsDeeperThan(h, maxDepth)) fail(`the inference request nests more than ${maxDepth} levels deep`);
  if (h.id !== undefined && typeof h.id !== 'string') fail('"id" must be a string');
  const parameters = parametersOf(h.parameters, 'request ');
  // Sequences would run statelessly and answer wrongly: refused. Triton's priority and timeout
  // are taken and left to the platform's queue order and EMBERS_QUEUE_TIMEOUT_MS.
  for (const k of ['sequence_id', 'sequence_start', 'sequence_end']) if (parameters?.[k] !== undefined) fail(`request parameter '${k}' is not supported: Embers runs models statelessly, each request on its own`);
  const binaryOutputs = parameters?.binary_data_output ?? false;
  if (typeof binaryOutputs !== 'boolean') fail("request parameter 'binary_data_output' must be a boolean");
  if (!Array.isArray(h.inputs) || h.inputs.length === 0) fail('"inputs" must be a non-empty array of tensors');

  const declared = new Map(signature.inputs.map((s) => [s.name, s]));
  const seen = new Set<string>();
  const parts: Buffer[] = [];
  let at = 0;
  let tailUsed = 0;
  let allBinary = true;
  const inputs: InferenceDescriptor['inputs'] = [];
  for (const raw of h.inputs as unknown[]) {
    if (!isObject(raw)) fail('each input must be an object with name, shape, datatype and data');
    const i = present(raw as Record<string, unknown>);
    if (typeof i.name !== 'string' || i.name === '') fail('an input has no "name"');
    const name = i.name as string;
    if (seen.has(name)) fail(`input '${name}' appears more than once`);
    seen.add(name);
    const spec = declared.get(name) ?? fail(`unexpected inference input '${name}': the model takes ${[...declared.keys()].map((n) => `'${n}'`).join(', ')}`);
    if (typeof i.datatype !== 'string' || !(DATATYPES as readonly string[]).includes(i.datatype)) fail(`input '${name}': datatype must be one of ${DATATYPES.join(', ')}`);
    const datatype = i.datatype as Datatype;
    if (datatype !== spec.datatype) fail(`input '${name}': datatype ${datatype} where the model takes ${spec.datatype}`);
    if (!Array.isArray(i.shape) || !i.shape.every((d) => Number.isSafeInteger(d) && (d as number) >= 0)) fail(`input '${name}': shape must be an array of non-negative integers`);
    const shape = i.shape as number[];
    if (!shapeFits(spec.shape, shape)) fail(`input '${name}': shape [${shape.join(',')}] does not fit the model's [${spec.shape.join(',')}] (-1: any size)`);
    const p = parametersOf(i.parameters, `input '${name}': `);
    const count = elementCount(shape);
    const binarySize = p?.binary_data_size;
    let bytes: Buffer;
    if (binarySize !== undefined) {
      if (i.data !== undefined) fail(`input '${name}' has both "data" and the binary_data_size parameter; send one`);
      if (!Number.isSafeInteger(binarySize) || (binarySize as number) < 0) fail(`input '${name}': binary_data_size must be a non-negative integer`);
      const size = binarySize as number;
      if (tailUsed + size > tail.length) fail(`input '${name}': binary_data_size ${size} runs past the end of the body (${tail.length - tailUsed} bytes left after the JSON header)`);
      bytes = tail.subarray(tailUsed, tailUsed + size);
      tailUsed += size;
      checkBinary(name, datatype, count, bytes);
    } else {
      if (i.data === undefined) fail(`input '${name}' has no "data" (and no binary_data_size parameter)`);
      bytes = jsonToBytes(name, datatype, count, i.data);
      allBinary = false;
    }
    const { binary_data_size: _, ...rest } = p ?? {};
    inputs.push({ name, datatype, shape, size: bytes.length, ...(Object.keys(rest).length ? { parameters: rest } : {}) });
    parts.push(bytes);
    at += bytes.length;
  }
  for (const s of signature.inputs) if (!seen.has(s.name)) fail(`expected input '${s.name}' (${s.datatype} [${s.shape.join(',')}]), which the request does not have`);
  if (tailUsed !== tail.length) fail(`the body has ${tail.length - tailUsed} bytes after the JSON header that no input's binary_data_size accounts for`);

  let outputs: InferenceDescriptor['outputs'];
  if (h.outputs !== undefined) {
    if (!Array.isArray(h.outputs)) fail('"outputs" must be an array');
    const known = new Set(signature.outputs.map((o) => o.name));
    outputs = (h.outputs as unknown[]).map((raw) => {
      if (!isObject(raw) || typeof raw.name !== 'string') return fail('each requested output must be an object with a "name"');
      const o = present(raw) as { name: string; parameters?: unknown };
      if (known.size && !known.has(o.name)) fail(`unexpected inference output '${o.name}': the model gives ${[...known].map((n) => `'${n}'`).join(', ')}`);
      const op = parametersOf(o.parameters, `output '${o.name}': `);
      if (op?.classification !== undefined) fail(`output '${o.name}': the classification extension is not supported; ask for the tensor and rank it yourself`);
      const binary = op?.binary_data ?? binaryOutputs;
      if (typeof binary !== 'boolean') fail(`output '${o.name}': binary_data must be a boolean`);
      return { name: o.name, binary: binary as boolean };
    });
  }
  const body = allBinary && parts.length === 1 ? parts[0] : allBinary && tail.length === at ? tail : Buffer.concat(parts, at);
  const descriptor: InferenceDescriptor = { ...(h.id !== undefined ? { id: h.id as string } : {}), ...(parameters ? { parameters } : {}), inputs, ...(outputs ? { outputs } : {}), binaryOutputs: binaryOutputs as boolean };
  return { descriptor, body };
}

/** A binary tensor's bytes must be exactly its elements: fixed-size ones, or BYTES' length-prefixed strings. */
function checkBinary(name: string, datatype: Datatype, count: number, bytes: Buffer): void {
  if (datatype !== 'BYTES') {
    const want = count * elementBytes(datatype);
    if (bytes.length !== want) fail(`input '${name}': ${bytes.length} bytes of binary data, where ${count} ${datatype} elements take ${want}`);
    return;
  }
  let at = 0;
  for (let n = 0; n < count; n++) {
    if (at + 4 > bytes.length) fail(`input '${name}': the binary data holds fewer than the shape's ${count} BYTES elements`);
    at += 4 + bytes.readUInt32LE(at);
  }
  if (at !== bytes.length) fail(`input '${name}': the binary data's BYTES elements (4-byte length, then the bytes) do not end where binary_data_size says`);
}

/** Row-major elements of `data`, flat or nested as the shape (the protocol allows both). */
function flatten(name: string, data: unknown): unknown[] {
  if (!Array.isArray(data)) return fail(`input '${name}': data must be an array`);
  if (!data.some(Array.isArray)) return data;
  const out: unknown[] = [];
  const walk = (v: unknown[]) => {
    for (const x of v) if (Array.isArray(x)) walk(x);
    else out.push(x);
  };
  walk(data);
  return out;
}

const INT_RANGE: Partial<Record<Datatype, [number, number]>> = {
  UINT8: [0, 255], INT8: [-128, 127], UINT16: [0, 65_535], INT16: [-32_768, 32_767], UINT32: [0, 4_294_967_295], INT32: [-2_147_483_648, 2_147_483_647],
};

/** JSON `data` as the binary extension lays it out (little-endian, row-major; BYTES length-prefixed). */
function jsonToBytes(name: string, datatype: Datatype, count: number, data: unknown): Buffer {
  const values = flatten(name, data);
  if (values.length !== count) fail(`input '${name}': ${values.length} elements in data, where its shape holds ${count}`);
  const bad = (i: number, what: string): never => fail(`input '${name}': element ${i} is ${JSON.stringify(values[i])?.slice(0, 40)}, not ${what}`);
  if (datatype === 'BYTES') return lengthPrefixed(values.map((v, i) => (typeof v === 'string' ? v : bad(i, 'a string'))));
  const out = Buffer.alloc(count * elementBytes(datatype));
  const view = new DataView(out.buffer, out.byteOffset, out.byteLength);
  const range = INT_RANGE[datatype];
  for (let i = 0; i < count; i++) {
    const v = values[i];
    if (datatype === 'BOOL') {
      if (typeof v !== 'boolean') bad(i, 'true or false');
      out[i] = v ? 1 : 0;
      continue;
    }
    if (typeof v !== 'number' || !Number.isFinite(v)) bad(i, `a ${datatype} number`);
    const x = v as number;
    if (range) {
      if (!Number.isInteger(x) || x < range[0] || x > range[1]) bad(i, `a ${datatype} integer (${range[0]}..${range[1]})`);
      if (datatype === 'UINT8') out[i] = x;
      else if (datatype === 'INT8') view.setInt8(i, x);
      else if (datatype === 'UINT16') view.setUint16(i * 2, x, true);
      else if (datatype === 'INT16') view.setInt16(i * 2, x, true);
      else if (datatype === 'UINT32') view.setUint32(i * 4, x, true);
      else view.setInt32(i * 4, x, true);
    } else if (datatype === 'INT64' || datatype === 'UINT64') {
      // Beyond 2^53 JSON.parse has already rounded it: refuse rather than feed a different number.
      if (!Number.isSafeInteger(x) || (datatype === 'UINT64' && x < 0)) bad(i, `a ${datatype} integer within ±2^53 (send larger ones as binary data)`);
      if (datatype === 'INT64') view.setBigInt64(i * 8, BigInt(x), true);
      else view.setBigUint64(i * 8, BigInt(x), true);
    } else if (datatype === 'FP16') view.setUint16(i * 2, toHalfBits(x), true);
    else if (datatype === 'FP32') view.setFloat32(i * 4, x, true);
    else view.setFloat64(i * 8, x, true);
  }
  return out;
}
