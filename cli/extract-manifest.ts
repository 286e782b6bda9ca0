// Child process of `embers deploy`: imports a bundle and prints its manifest as JSON.
// A separate process so a function's top-level code never runs inside the CLI.
import { pathToFileURL } from 'node:url';
import { z } from 'zod';
import { isFunctionDefinition, tensorSignatureOf } from '../sdk/index.ts';

/** A problem with the function's shape: reported as one line, without a stack. */
class ManifestError extends Error {}

/** What JSON can carry: a bytes field refuses all of these. */
const JSON_VALUES: unknown[] = ['x', 0, true, null, {}, []];

/**
 * A schema for bytes (bytes(), z.instanceof(Buffer), refined or not): a custom check that refuses
 * every kind of JSON value, so it can only be met by a binary body.
 */
function isBytes(schema: z.ZodType): boolean {
  return (schema as { _zod?: { def?: { type?: string } } })._zod?.def?.type === 'custom' && JSON_VALUES.every((v) => !schema.safeParse(v).success);
}

/**
 * binaryInput must name a field that takes bytes, and a body of bytes alone must make a valid
 * input: no other field may be required (the JSON Schema's `required`, taken with io 'input',
 * leaves out optional and defaulted ones). Refinements (a size check) are left to run time.
 */
function checkBinaryInput(input: z.ZodType, field: string, jsonSchema: object): void {
  const { properties, required } = jsonSchema as { properties?: object; required?: string[] };
  const fields = Object.keys(properties ?? {});
  const probe = input.safeParse({ [field]: Buffer.from([1]) });
  // A field of the object, or (a union of objects, say) one the schema takes bytes in and keeps:
  // an object schema strips a key it does not know, and would run on its defaults.
  const kept = probe.success && (probe.data as Record<string, unknown> | null)?.[field] instanceof Uint8Array;
  if (!fields.includes(field) && !kept) {
    throw new ManifestError(`binaryInput "${field}" is not a field of the input schema (its fields: ${fields.join(', ') || 'none'}); name the field a binary request body fills`);
  }
  const issues = probe.success ? [] : probe.error.issues.filter((i) => i.path[0] === field && (i.code === 'invalid_type' || i.code === 'invalid_union'));
  if (issues.length) {
    throw new ManifestError(`binaryInput "${field}": the input schema does not accept bytes there; make that field bytes() (or z.union([z.string(), bytes()]))`);
  }
  const others = (required ?? []).filter((f) => f !== field);
  if (others.length) {
    throw new ManifestError(`binaryInput "${field}": a binary request body fills only "${field}", but the input schema also requires ${others.join(', ')}; make those .optional() or give them a .default()`);
  }
}

/** What a zod string schema keeps of its regexes: its format's pattern, and each .regex() check's. */
interface ZodPatterns {
  _zod?: { def?: { pattern?: unknown; checks?: { _zod?: { def?: { pattern?: unknown } } }[] } };
}

/**
 * A JSON Schema `pattern` has no flags, so a regex whose flags change what it matches (i, m, s,
 * u, v) would be judged differently by the gateway (`/^[a-z]+$/i` would refuse "ABC"). Such
 * patterns are left out of the schema; the replica checks every input with the zod schema itself.
 */
function dropFlaggedPatterns(zodSchema: unknown, jsonSchema: Record<string, unknown>): void {
  const def = (zodSchema as ZodPatterns)._zod?.def;
  const regexes = [def?.pattern, ...(def?.checks ?? []).map((c) => c._zod?.def?.pattern)];
  const flagged = new Set(regexes.filter((r): r is RegExp => r instanceof RegExp && /[imsuv]/.test(r.flags)).map((r) => r.source));
  if (!flagged.size) return;
  if (typeof jsonSchema.pattern === 'string' && flagged.has(jsonSchema.pattern)) delete jsonSchema.pattern;
  if (Array.isArray(jsonSchema.allOf)) {
    const kept = (jsonSchema.allOf as Record<string, unknown>[]).filter((s) => !(Object.keys(s).length === 1 && typeof s.pattern === 'string' && flagged.has(s.pattern)));
    if (kept.length) jsonSchema.allOf = kept;
    else delete jsonSchema.allOf;
  }
}

const file = process.argv[2];
try {
  const mod = (await import(pathToFileURL(file).href)) as { default?: unknown };
  const def = mod.default;
  if (!isFunctionDefinition(def)) {
    throw new ManifestError('the file has no default export made with defineFunction() from "embers"');
  }
  if (!def.input || typeof (def.input as z.ZodType).safeParse !== 'function') throw new ManifestError('`input` must be a zod schema');
  if (typeof def.handler !== 'function') throw new ManifestError('`handler` must be a function');
  // Bytes never arrive in JSON: a bytes() field is `{ not: {} }` to the gateway's validation
  // (alone it refuses every JSON value; in a union with a string, the string is what JSON may send).
  const inputSchema = z.toJSONSchema(def.input as z.ZodType, {
    unrepresentable: 'any',
    io: 'input',
    override: ({ zodSchema, jsonSchema }) => {
      dropFlaggedPatterns(zodSchema, jsonSchema as Record<string, unknown>);
      if (!isBytes(zodSchema as unknown as z.ZodType)) return;
      const { description } = jsonSchema as { description?: string };
      for (const k of Object.keys(jsonSchema)) delete (jsonSchema as Record<string, unknown>)[k];
      Object.assign(jsonSchema, { not: {} }, description === undefined ? {} : { description });
    },
  });
  if (def.binaryInput !== undefined) checkBinaryInput(def.input as z.ZodType, def.binaryInput, inputSchema);
  process.stdout.write(
    JSON.stringify({
      name: def.name,
      models: def.models ?? {},
      inputSchema,
      batching: def.batching,
      scaling: def.scaling,
      timeoutMs: def.timeoutMs,
      pricing: def.pricing,
      maxQueueLength: def.maxQueueLength,
      binaryInput: def.binaryInput,
      vars: def.vars,
      tensors: tensorSignatureOf(def.input),
    }),
  );
} catch (err) {
  // The function's own top-level errors keep their stack: it points into the user's code.
  process.stderr.write(`${err instanceof ManifestError ? err.message : ((err as Error).stack ?? err)}\n`);
  process.exit(1);
}
