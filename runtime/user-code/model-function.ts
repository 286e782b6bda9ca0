// The handler of a bare model (a deploy of an ONNX file alone): its input is the model's
// tensors, its answer the model's outputs, with the function's dynamic batching between.
import type { TensorSignature } from '../../core/oip/datatypes.ts';
import { defineFunction, type FunctionDefinition } from '../../sdk/index.ts';
import { tensors, type TensorDeclaration } from '../../sdk/tensors.ts';

export function modelFunction(fn: { name: string; tensors?: TensorSignature }): FunctionDefinition {
  if (!fn.tensors) throw new Error(`${fn.name} is a bare model without tensor metadata; deploy it again`);
  const declared = Object.fromEntries(fn.tensors.inputs.map((s) => [s.name, [s.datatype, s.shape] as TensorDeclaration]));
  return defineFunction({
    name: fn.name,
    models: { model: '' },
    input: tensors(declared),
    handler: (input, ctx) => ctx.models.model.run(input),
  }) as unknown as FunctionDefinition;
}
