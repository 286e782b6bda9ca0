// tensors(): a function's input as named tensors, so the Open Inference Protocol can call it
// (POST /v2/models/<name>/infer) with JSON or binary tensors, and /v1/run with JSON ones.
import { z } from 'zod';
import { elementCount, type Tensor } from '../native/tensor.ts';
import { DATATYPES, shapeFits, TENSOR_TYPE, type Datatype, type TensorSignature, type TensorSpec } from '../core/oip/datatypes.ts';
import { InferenceRequestError, readInferenceRequest } from '../core/oip/request.ts';
import { inputTensors } from '../core/oip/tensors.ts';

/** A tensor's datatype and shape; -1 marks a dimension of any size. @example ['FP32', [-1, 3, 48, 192]] */
export type TensorDeclaration = readonly [Datatype, readonly number[]];

const TENSORS = Symbol.for('embers.tensors');

/** A tensors() schema: its fields are tensors, and it carries their metadata. */
export type TensorsSchema<K extends string> = z.ZodType<Record<K, Tensor>> & { readonly [TENSORS]: TensorSignature };

const specOf = (name: string, [datatype, shape]: TensorDeclaration): TensorSpec => {
  if (!(DATATYPES as readonly string[]).includes(datatype)) throw new TypeError(`tensors(): "${name}" has datatype ${JSON.stringify(datatype)}; use one of ${DATATYPES.join(', ')}`);
  if (!Array.isArray(shape) || !shape.every((d) => Number.isInteger(d) && d >= -1)) throw new TypeError(`tensors(): "${name}" needs a shape of integers, -1 for any size`);
  return { name, datatype, shape: [...shape] };
};

/** A tensor the protocol decoded (or a handler's own), checked against its declaration. */
function declaredTensor(spec: TensorSpec): z.ZodType<Tensor> {
  const type = TENSOR_TYPE[spec.datatype];
  return z.custom<Tensor>((v) => {
    const t = v as Tensor;
    return typeof t === 'object' && t !== null && t.type === type && Array.isArray(t.dims) && shapeFits(spec.shape, t.dims) && t.data?.length === elementCount(t.dims);
  }, { message: `expected a ${spec.datatype} tensor of shape [${spec.shape.join(',')}]` });
}

/** The same tensor as JSON sends it: `{ "shape": [...], "data": [...] }`, data flat or nested. */
function jsonTensor(spec: TensorSpec): z.ZodType<Tensor> {
  return z.object({ shape: z.array(z.number().int().min(0)), data: z.array(z.unknown()) }).transform((v, ctx) => {
    try {
      const { descriptor, body } = readInferenceRequest({ inputs: [{ name: spec.name, datatype: spec.datatype, shape: v.shape, data: v.data }] }, EMPTY, { inputs: [spec], outputs: [] }, 64);
      return inputTensors(descriptor, body)[spec.name];
    } catch (err) {
      if (!(err instanceof InferenceRequestError)) throw err;
      ctx.addIssue({ code: 'custom', message: err.message });
      return z.NEVER;
    }
  });
}

const EMPTY = Buffer.alloc(0);

/**
 * The input of a function that takes tensors. Through the Open Inference Protocol each field
 * arrives as a Tensor (BYTES as `type: 'bytes'`, data an array of Uint8Array); through /v1/run
 * as JSON `{ "shape": [...], "data": [...] }`, made the same Tensor. `outputs` declares what the
 * handler returns, for the model's metadata.
 * @example input: tensors({ image: ['BYTES', [-1]] }, { outputs: { lines: ['BYTES', [-1]] } })
 */
export function tensors<K extends string>(inputs: Record<K, TensorDeclaration>, options: { outputs?: Record<string, TensorDeclaration> } = {}): TensorsSchema<K> {
  const specs = Object.entries(inputs).map(([name, d]) => specOf(name, d as TensorDeclaration));
  if (!specs.length) throw new TypeError('tensors(): declare at least one input tensor');
  const shape: Record<string, z.ZodType<Tensor>> = {};
  for (const s of specs) shape[s.name] = z.union([declaredTensor(s), jsonTensor(s)]);
  const signature: TensorSignature = { inputs: specs, outputs: Object.entries(options.outputs ?? {}).map(([name, d]) => specOf(name, d)) };
  return Object.assign(z.object(shape), { [TENSORS]: signature }) as unknown as TensorsSchema<K>;
}

/**
 * The tensors a function's input declares: a tensors() schema, or one in a union beside other
 * shapes of input (JSON fields for /v1/run, tensors for the protocol).
 */
export function tensorSignatureOf(schema: unknown): TensorSignature | undefined {
  const own = (schema as { [TENSORS]?: TensorSignature } | null)?.[TENSORS];
  if (own) return own;
  const options = (schema as { _zod?: { def?: { type?: string; options?: unknown[] } } } | null)?._zod?.def;
  if (options?.type !== 'union') return undefined;
  for (const o of options.options ?? []) {
    const found = tensorSignatureOf(o);
    if (found) return found;
  }
  return undefined;
}
