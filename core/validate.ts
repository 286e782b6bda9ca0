// Input validation from a function's JSON Schema (generated from its zod schema at deploy), for
// the parts that check input before it costs a queue round trip: gateway runs and batch lines.
import { Ajv2020, type ValidateFunction } from 'ajv/dist/2020.js';

const ajv = new Ajv2020({ allErrors: true, strict: false });

export type InputValidator = ValidateFunction;

export function compileInputSchema(schema: Record<string, unknown>): InputValidator {
  return ajv.compile(schema);
}

/** `/image must be string; (body) must have required property 'x'` */
export function describeErrors(v: InputValidator): string {
  return (v.errors ?? []).map((e) => `${e.instancePath || '(body)'} ${e.message}`).join('; ');
}
