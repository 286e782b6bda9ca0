// A bare model's deploy: no bundle, the platform's handler runs it (runtime/user-code/model-function.ts).
// Its tensors come from its ONNX graph, read once here, so its metadata is there while it
// runs no replica; its JSON input schema is what tensors() makes of them.
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { z } from 'zod';
import type { DeploySpec } from '../core/contracts.ts';
import { OnnxSignatureError, readOnnxSignature } from '../core/onnx-signature.ts';
import type { TensorSignature } from '../core/oip/datatypes.ts';
import { tensors, type TensorDeclaration } from '../sdk/tensors.ts';
import type { GatewayDeps } from './deps.ts';
import { ApiError } from './errors.ts';

/** What a bare model's version stores as its bundle: nothing runs it. */
export const BARE_MODEL_BUNDLE = Buffer.from('// A bare model: the platform\'s own handler runs it (runtime/user-code/model-function.ts).\nexport default null;\n');

/** The one model handle a bare model has. */
export const BARE_MODEL_HANDLE = 'model';

/** A bare model's spec, completed: its tensors and input schema. */
export async function bareModelSpec(deps: Pick<GatewayDeps, 'stores'>, tenant: string, spec: DeploySpec): Promise<DeploySpec> {
  const handles = Object.keys(spec.models);
  if (handles.length !== 1 || handles[0] !== BARE_MODEL_HANDLE) throw new ApiError(400, 'invalid_deploy', `a bare model (spec.kind "model") has one model, named "${BARE_MODEL_HANDLE}": { "models": { "model": "s3://…/model.onnx" } }`);
  if (spec.binaryInput !== undefined) throw new ApiError(400, 'invalid_deploy', 'a bare model takes tensors, not a binary body: leave out spec.binaryInput');
  const signature = await signatureOf(deps, tenant, spec.models[BARE_MODEL_HANDLE]);
  // Calls batch along the first dimension: a model without one of any size on every tensor runs them one by one.
  const batching = batchable(signature) ? spec.batching : { ...spec.batching, maxBatchSize: 1 };
  return { ...spec, batching, tensors: signature, inputSchema: inputSchemaOf(signature) };
}

/** Whether every tensor's first dimension takes any size (the batch dimension). */
export function batchable(signature: TensorSignature): boolean {
  return [...signature.inputs, ...signature.outputs].every((t) => t.shape.length > 0 && t.shape[0] === -1);
}

/** The JSON Schema /v1/run checks a bare model's input with. */
export function inputSchemaOf(signature: TensorSignature): Record<string, unknown> {
  const declared = Object.fromEntries(signature.inputs.map((s) => [s.name, [s.datatype, s.shape] as TensorDeclaration]));
  return z.toJSONSchema(tensors(declared), { unrepresentable: 'any', io: 'input' }) as Record<string, unknown>;
}

/** The model's tensors, from a copy of it on local disk (the graph's inputs sit after its weights). */
async function signatureOf(deps: Pick<GatewayDeps, 'stores'>, tenant: string, uri: string): Promise<TensorSignature> {
  const from = await deps.stores.forUri(tenant, uri);
  if (!from) throw new ApiError(400, 'model_not_found', `${uri} does not exist; upload it with \`embers models upload\``);
  const dir = await mkdtemp(path.join(os.tmpdir(), 'embers-bare-model-'));
  try {
    const file = path.join(dir, 'model.onnx');
    await from.download(uri, file).catch((err: Error) => {
      throw new ApiError(400, 'model_unreachable', `${uri} cannot be read: ${err.message}`);
    });
    return await readOnnxSignature(file);
  } catch (err) {
    if (err instanceof OnnxSignatureError) throw new ApiError(400, 'invalid_model', `${uri} cannot be served as a bare model: ${err.message}`);
    throw err;
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
