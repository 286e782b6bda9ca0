// zod schemas as the JSON Schema 2020-12 an OpenAPI 3.1 document holds, and JSON Schemas moved
// into the document: their local `$ref`s rewritten to where they now sit.
import { z } from 'zod';

export type JsonObject = Record<string, unknown>;

/** Where a document keeps its named schemas. */
export const COMPONENTS = '#/components/schemas/';

/**
 * `schema` as JSON Schema, and the named schemas it refers to (those given `.meta({ id })`), to
 * go under components. A request is described as it may be sent (`input`: fields with defaults
 * are optional), a response as it is answered (`output`); a named schema's input form is named
 * `<id>Input`, so both can sit in one document.
 */
export function toJsonSchema(schema: z.ZodType, io: 'input' | 'output'): { schema: JsonObject; components: Record<string, JsonObject> } {
  const converted = z.toJSONSchema(schema, { target: 'draft-2020-12', io, unrepresentable: 'any', override: dropSafeIntegerBounds }) as JsonObject;
  const { $schema: _dialect, $defs, ...rest } = converted;
  const suffix = io === 'input' ? 'Input' : '';
  const relocate = (ref: string) => (ref.startsWith('#/$defs/') ? `${COMPONENTS}${ref.slice('#/$defs/'.length)}${suffix}` : ref);
  const components: Record<string, JsonObject> = {};
  for (const [id, def] of Object.entries(($defs ?? {}) as Record<string, JsonObject>)) components[`${id}${suffix}`] = rewriteRefs(def, relocate) as JsonObject;
  return { schema: rewriteRefs(rest, relocate) as JsonObject, components };
}

/** `.int()` bounds a number to the safe integers: said on every integer field, it is noise. */
function dropSafeIntegerBounds({ jsonSchema }: { jsonSchema: JsonObject }): void {
  if (jsonSchema.minimum === Number.MIN_SAFE_INTEGER) delete jsonSchema.minimum;
  if (jsonSchema.maximum === Number.MAX_SAFE_INTEGER) delete jsonSchema.maximum;
}

/**
 * A JSON Schema of its own (a deployed function's input schema) placed at `pointer` in the
 * document: its `$ref`s to itself (`#`, `#/$defs/…`) now start at `pointer`, and its `$schema`
 * goes (the document's dialect is 2020-12 already).
 */
export function embedSchema(schema: JsonObject, pointer: string): JsonObject {
  const { $schema: _dialect, ...rest } = schema;
  return rewriteRefs(rest, (ref) => (ref === '#' ? pointer : ref.startsWith('#/') ? `${pointer}${ref.slice(1)}` : ref)) as JsonObject;
}

/** A copy of `value` with every `$ref` string passed through `rewrite`. */
export function rewriteRefs(value: unknown, rewrite: (ref: string) => string): unknown {
  if (Array.isArray(value)) return value.map((v) => rewriteRefs(v, rewrite));
  if (value === null || typeof value !== 'object') return value;
  const out: JsonObject = {};
  for (const [k, v] of Object.entries(value)) out[k] = k === '$ref' && typeof v === 'string' ? rewrite(v) : rewriteRefs(v, rewrite);
  return out;
}
