// The Open Inference Protocol's tensor datatypes, and how each maps to the platform's tensors
// (native/tensor.ts), to onnxruntime's and to ONNX's element types.
import { z } from 'zod';
import { typedArrayOf, type TensorType } from '../../native/tensor.ts';

export const DATATYPES = ['BOOL', 'UINT8', 'UINT16', 'UINT32', 'UINT64', 'INT8', 'INT16', 'INT32', 'INT64', 'FP16', 'FP32', 'FP64', 'BYTES'] as const;
export type Datatype = (typeof DATATYPES)[number];

/** The platform tensor type of each datatype (BYTES: an array of byte strings). */
export const TENSOR_TYPE: Record<Datatype, TensorType> = {
  BOOL: 'bool', UINT8: 'uint8', UINT16: 'uint16', UINT32: 'uint32', UINT64: 'uint64', INT8: 'int8', INT16: 'int16', INT32: 'int32', INT64: 'int64', FP16: 'float16', FP32: 'float32', FP64: 'float64', BYTES: 'bytes',
};

/** Bytes per element in the binary tensor extension's layout: its tensor type's (BYTES is variable: a 4-byte length, then the bytes). */
export function elementBytes(datatype: Exclude<Datatype, 'BYTES'>): number {
  return typedArrayOf(TENSOR_TYPE[datatype])!.BYTES_PER_ELEMENT;
}

/** The datatype of a platform tensor type (onnxruntime's `string` is BYTES too). */
export function datatypeOf(type: TensorType): Datatype | undefined {
  if (type === 'string') return 'BYTES';
  return DATATYPES.find((d) => TENSOR_TYPE[d] === type);
}

/** ONNX TensorProto.DataType numbers of the datatypes onnxruntime-node can feed. */
export const ONNX_ELEMENT_TYPE: Record<number, Datatype> = {
  1: 'FP32', 2: 'UINT8', 3: 'INT8', 4: 'UINT16', 5: 'INT16', 6: 'INT32', 7: 'INT64', 8: 'BYTES', 9: 'BOOL', 10: 'FP16', 11: 'FP64', 12: 'UINT32', 13: 'UINT64',
};

/** A tensor as model metadata describes it: -1 marks a dimension of any size. */
export const TensorSpecSchema = z.object({
  name: z.string().min(1).max(256),
  datatype: z.enum(DATATYPES),
  shape: z.array(z.number().int().min(-1)).max(16),
});
export type TensorSpec = z.infer<typeof TensorSpecSchema>;

/** What a function takes and gives as tensors: its Open Inference Protocol metadata. */
export const TensorSignatureSchema = z.object({
  inputs: z.array(TensorSpecSchema).min(1).max(64),
  outputs: z.array(TensorSpecSchema).max(64).default([]),
});
export type TensorSignature = z.infer<typeof TensorSignatureSchema>;

/** Whether a shape a caller sent fits the declared one (same rank; -1 takes any size). */
export function shapeFits(declared: readonly number[], actual: readonly number[]): boolean {
  return declared.length === actual.length && declared.every((d, i) => d === -1 || d === actual[i]);
}

/** BYTES elements as the binary extension lays them out: each a 4-byte little-endian length, then its bytes (strings as UTF-8). */
export function lengthPrefixed(items: readonly (string | Uint8Array)[]): Buffer {
  const bytes = items.map((s) => (typeof s === 'string' ? Buffer.from(s, 'utf8') : s));
  const out = Buffer.allocUnsafe(bytes.reduce((n, s) => n + 4 + s.length, 0));
  let at = 0;
  for (const s of bytes) {
    out.writeUInt32LE(s.length, at);
    out.set(s, at + 4);
    at += 4 + s.length;
  }
  return out;
}
