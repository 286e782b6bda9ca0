// Plain tensors that cross threads and processes; structurally compatible with ort.Tensor
// (type, data, dims), so a handler may pass either. No onnxruntime import here: user bundles
// include this file.

/** onnxruntime's types; `bytes` is a tensor of byte strings (the protocol's BYTES), fed to onnxruntime as `string`. */
export type TensorType = 'float32' | 'float64' | 'int32' | 'int64' | 'uint8' | 'int8' | 'bool' | 'float16' | 'uint16' | 'int16' | 'uint32' | 'uint64' | 'string' | 'bytes';

export type TensorData = Float32Array | Float64Array | Int32Array | BigInt64Array | Uint8Array | Int8Array | Uint16Array | Int16Array | Uint32Array | BigUint64Array | string[] | Uint8Array[];

export interface Tensor {
  readonly type: TensorType;
  readonly data: TensorData;
  readonly dims: readonly number[];
}

export type Feeds = Record<string, Tensor>;

/** Tensor data that sits on an ArrayBuffer (every type but string and bytes). */
export type TypedTensorData = Exclude<TensorData, string[] | Uint8Array[]>;

export function isTyped(data: TensorData): data is TypedTensorData {
  return !Array.isArray(data);
}

const ARRAYS: Record<TensorType, new (n: number) => TensorData> = {
  uint16: Uint16Array,
  int16: Int16Array,
  uint32: Uint32Array,
  uint64: BigUint64Array,
  string: Array as unknown as new (n: number) => string[],
  bytes: Array as unknown as new (n: number) => Uint8Array[],
  float32: Float32Array,
  float64: Float64Array,
  int32: Int32Array,
  int64: BigInt64Array,
  uint8: Uint8Array,
  int8: Int8Array,
  bool: Uint8Array,
  float16: Uint16Array,
};

type TypedArrayConstructor = { new (buffer: ArrayBufferLike, byteOffset: number, length: number): TypedTensorData; readonly BYTES_PER_ELEMENT: number };

/** The typed array a tensor of `type` holds its data in; undefined for string and bytes, which hold arrays. */
export function typedArrayOf(type: TensorType): TypedArrayConstructor | undefined {
  const Ctor = ARRAYS[type] as unknown;
  return Ctor === Array ? undefined : (Ctor as TypedArrayConstructor);
}

/** Whether a value is a Tensor: a type, dims, and data in a typed array or an array. */
export function isTensor(value: unknown): value is Tensor {
  const t = value as Tensor;
  return typeof t === 'object' && t !== null && typeof t.type === 'string' && Array.isArray(t.dims) && (ArrayBuffer.isView(t.data) || Array.isArray(t.data));
}

export function elementCount(dims: readonly number[]): number {
  return dims.reduce((a, b) => a * b, 1);
}

/** Builds a tensor, checking that data length matches dims. */
export function tensor(type: TensorType, data: TensorData, dims: readonly number[]): Tensor {
  if (data.length !== elementCount(dims)) {
    throw new RangeError(`tensor data has ${data.length} elements but dims [${dims.join(',')}] need ${elementCount(dims)}`);
  }
  return { type, data, dims: [...dims] };
}

export function allocate(type: TensorType, length: number): TensorData {
  const Ctor = ARRAYS[type];
  if (!Ctor) throw new TypeError(`unsupported tensor type ${type}`);
  return new Ctor(length);
}

/** Signature of everything but the batch dimension: tensors batch together only when equal. */
export function batchKey(feeds: Feeds): string {
  return Object.keys(feeds)
    .sort()
    .map((k) => `${k}:${feeds[k].type}:${feeds[k].dims.slice(1).join('x')}`)
    .join('|');
}

export function rows(feeds: Feeds): number {
  const first = Object.values(feeds)[0];
  return first ? (first.dims[0] ?? 1) : 0;
}

/** Concatenates many callers' feeds along dim 0 (all must share batchKey). */
export function concatFeeds(parts: Feeds[]): Feeds {
  if (parts.length === 1) return parts[0];
  const out: Record<string, Tensor> = {};
  for (const name of Object.keys(parts[0])) {
    const first = parts[0][name];
    const total = parts.reduce((n, p) => n + p[name].dims[0], 0);
    const data = allocate(first.type, parts.reduce((n, p) => n + p[name].data.length, 0));
    let offset = 0;
    for (const p of parts) {
      const part = p[name].data;
      if (Array.isArray(data)) for (let i = 0; i < part.length; i++) data[offset + i] = part[i] as never;
      else (data as Float32Array).set(part as Float32Array, offset);
      offset += part.length;
    }
    out[name] = { type: first.type, data, dims: [total, ...first.dims.slice(1)] };
  }
  return out;
}

/** Splits batched outputs back into per-caller outputs by their row counts. */
export function splitOutputs(outputs: Feeds, rowCounts: number[]): Feeds[] {
  if (rowCounts.length === 1) return [outputs];
  const total = rowCounts.reduce((a, b) => a + b, 0);
  const result: Record<string, Tensor>[] = rowCounts.map(() => ({}));
  for (const [name, t] of Object.entries(outputs)) {
    if (t.dims[0] !== total) {
      throw new Error(`output ${name} has batch dimension ${t.dims[0]}, expected ${total}: this model cannot be batched; set batching.maxBatchSize to 1`);
    }
    const perRow = t.data.length / total;
    let row = 0;
    rowCounts.forEach((n, i) => {
      const data = t.data.slice(row * perRow, (row + n) * perRow) as TensorData;
      result[i][name] = { type: t.type, data, dims: [n, ...t.dims.slice(1)] };
      row += n;
    });
  }
  return result;
}
