// Input validation from a function's JSON Schema (generated from its zod schema at deploy), for
// the parts that check input before it costs a queue round trip: gateway runs and batch lines.
//
// A schema's `pattern`s are the function author's regexes, and they run in the gateway, which
// every function shares: `^(a+)+$` against forty a's and a "!" backtracks for hours on V8's
// default engine. So the gateway runs each pattern on V8's linear-time engine (the `l` flag,
// no backtracking), and a pattern that engine cannot run (back-references, lookarounds, large
// counted repeats, \p{…}) or a string with characters outside the BMP (where the engine's
// missing `u` flag could read it differently) is passed here and judged where it is exact: the
// replica checks every input against the function's own zod schema before its handler runs,
// and there a slow regex stalls only that function.
import v8 from 'node:v8';
import { Ajv2020, type ValidateFunction } from 'ajv/dist/2020.js';

v8.setFlagsFromString('--enable-experimental-regexp-engine');

const ASTRAL = /[\uD800-\uDFFF]/;
/** Unicode-mode syntax that reads differently, or not at all, without the `u` flag. */
const UNICODE_ONLY = /\\[pP]\{|\\u\{/;

interface RegExpLike {
  test(s: string): boolean;
}

/** ajv's code.regExp: how a schema's patterns are compiled (see above). */
function linearPattern(pattern: string, flags: string): RegExpLike {
  // The exact regex, as ajv would make it: a pattern it rejects fails the deploy.
  new RegExp(pattern, flags);
  let linear: RegExp | undefined;
  try {
    linear = UNICODE_ONLY.test(pattern) ? undefined : new RegExp(pattern, 'l');
  } catch {
    linear = undefined;
  }
  return {
    test: (s: string) => linear === undefined || ASTRAL.test(s) || linear.test(s),
    // ajv keys compiled patterns by this: one per pattern.
    toString: () => `/${pattern}/l`,
  } as RegExpLike;
}
linearPattern.code = 'linearPattern';

// addUsedSchema false: a schema's $id is not registered, so two functions (or two versions) with
// the same $id do not collide. unicodeRegExp false: patterns compile as the author's JavaScript
// regex did (zod's schema drops its flags; most have no `u`), so one valid there, such as
// `^[\w-.]+$` (a syntax error in Unicode mode), deploys; the replica judges with the regex itself.
// allErrors false: a check stops at the first mistake. With every error collected, an 8 MB body of
// four million wrong-typed array items cost the gateway 1.4 GB and 17 s, and its answer (every
// error in `details`) was past the longest string V8 makes: a 500.
const ajv = new Ajv2020({ allErrors: false, strict: false, addUsedSchema: false, unicodeRegExp: false, code: { regExp: linearPattern } });

export type InputValidator = ValidateFunction;

/**
 * Bounds of an input schema a deploy may bring. ajv's compile time grows faster than the schema
 * (2,000 properties with patterns took 3–4 s here), and it runs in every gateway's event loop;
 * real input schemas have tens of parts, not thousands.
 */
export const MAX_SCHEMA_PARTS = 1_000;
export const MAX_SCHEMA_BYTES = 256 * 1024;

/** Why a schema is past those bounds (to follow "spec.inputSchema "), or undefined. */
export function schemaTooLarge(schema: unknown): string | undefined {
  // Counted as they are found, without recursion: the schema is a caller's JSON.
  let parts = 0;
  const stack: object[] = [];
  const visit = (v: unknown): boolean => {
    if (typeof v !== 'object' || v === null) return true;
    stack.push(v);
    return ++parts <= MAX_SCHEMA_PARTS;
  };
  let within = visit(schema);
  while (within && stack.length > 0) {
    const v = stack.pop()!;
    for (const child of Array.isArray(v) ? v : Object.values(v)) if (!(within = visit(child))) break;
  }
  if (!within) return `has more than ${MAX_SCHEMA_PARTS} objects and arrays; an input schema this large would stall every gateway while it compiles`;
  const bytes = Buffer.byteLength(JSON.stringify(schema));
  if (bytes > MAX_SCHEMA_BYTES) return `is ${bytes} bytes as JSON, over ${MAX_SCHEMA_BYTES}`;
  return undefined;
}

/**
 * Keywords whose check can cost more than linear time in the input, whatever the body limit:
 * references (`$ref` under two branches of an `anyOf` doubles the work at every level the input
 * nests: 24 levels stalled the gateway 2.6 s, 40 would take days) and `uniqueItems` (ajv compares
 * every pair of items: 25,000 objects stalled it 28 s).
 */
const SUPERLINEAR = new Set(['$ref', '$dynamicRef', '$recursiveRef', 'uniqueItems']);

/** Whether `schema` holds one of SUPERLINEAR's keywords anywhere (walked without recursion). */
function superlinear(schema: unknown): boolean {
  const stack: unknown[] = [schema];
  while (stack.length > 0) {
    const v = stack.pop();
    if (typeof v !== 'object' || v === null) continue;
    if (!Array.isArray(v) && Object.keys(v).some((k) => SUPERLINEAR.has(k) && (k !== 'uniqueItems' || (v as Record<string, unknown>)[k] === true))) return true;
    for (const child of Array.isArray(v) ? v : Object.values(v)) stack.push(child);
  }
  return false;
}

/** Passes every input: for a schema the gateway leaves to the replica. */
const unchecked = Object.assign(() => true, { errors: null, schema: {}, schemaEnv: undefined }) as unknown as InputValidator;

/**
 * What a check at the gateway may cost, as bounds on the input for its schema; larger inputs pass
 * here, for the replica to judge. Without SUPERLINEAR keywords every part of a schema may apply to
 * every value of the input, once: (a) each such application may make an error object, which ajv
 * keeps or drops (~1 µs each here: 330 anyOf branches, each `contains` over 50,000 numbers, made
 * 16 million, 20 s and 2.6 GB); (b) keywords cost up to their own size (an enum of 20,000 labels
 * compared with each of 100,000 items: 9.8 s), and strings their length (patterns). So: parts ×
 * values ≤ CHECK_PARTS_BUDGET, and schema bytes × (values + string characters) ≤
 * CHECK_BYTES_BUDGET (~0.1 ns a unit): each about 0.1 s of the event loop at worst.
 */
export const CHECK_PARTS_BUDGET = 100_000;
export const CHECK_BYTES_BUDGET = 1e9;

/**
 * Whether `input` holds more than `maxValues` values, or more than `maxSize` values and string
 * characters (keys included); walked without recursion, stopping past either.
 */
function inputOver(input: unknown, maxValues: number, maxSize: number): boolean {
  let values = 1;
  let size = 1;
  const stack: object[] = [];
  const add = (v: unknown) => {
    if (typeof v === 'string') size += v.length;
    else if (typeof v === 'object' && v !== null) stack.push(v);
  };
  add(input);
  while (stack.length > 0 && values <= maxValues && size <= maxSize) {
    const v = stack.pop()!;
    if (Array.isArray(v)) {
      values += v.length;
      if ((size += v.length) > maxSize || values > maxValues) return true;
      for (const child of v) add(child);
    } else {
      for (const k in v) {
        values++;
        size += 1 + k.length;
        add((v as Record<string, unknown>)[k]);
      }
    }
  }
  return values > maxValues || size > maxSize;
}

/** Objects and arrays in a schema (the parts that apply to input), counted without recursion. */
function partsOf(schema: unknown): number {
  let parts = 0;
  const stack: unknown[] = [schema];
  while (stack.length > 0) {
    const v = stack.pop();
    if (typeof v !== 'object' || v === null) continue;
    parts++;
    for (const child of Array.isArray(v) ? v : Object.values(v)) stack.push(child);
  }
  return parts;
}

/** `validate` for inputs within the budgets for `schema`; larger ones pass, for the replica to judge. */
function bounded(validate: InputValidator, schema: unknown): InputValidator {
  const maxValues = Math.floor(CHECK_PARTS_BUDGET / Math.max(1, partsOf(schema)));
  const maxSize = Math.floor(CHECK_BYTES_BUDGET / Math.max(1, Buffer.byteLength(JSON.stringify(schema))));
  const check = (input: unknown) => {
    if (!inputOver(input, maxValues, maxSize)) return validate(input);
    validate.errors = null;
    return true;
  };
  // The errors are the validator's own, as ajv's callers read them.
  Object.defineProperty(check, 'errors', { get: () => validate.errors, set: (e: InputValidator['errors']) => (validate.errors = e) });
  return Object.assign(check, { schema: validate.schema, schemaEnv: validate.schemaEnv }) as unknown as InputValidator;
}

/**
 * Throws (ajv's message) when the schema is not a valid JSON Schema. A schema whose check could
 * stall the gateway (SUPERLINEAR) is compiled, so a deploy still learns it is invalid, but passes
 * every input here, as does an input past the check budgets for its schema: the replica checks each
 * input against the function's zod schema before its handler runs, where a slow check stalls
 * only that function.
 */
export function compileInputSchema(schema: Record<string, unknown>): InputValidator {
  const validate = ajv.compile(schema);
  // ajv keeps every compiled schema in a cache keyed by the object; callers keep what they need.
  ajv.removeSchema(schema);
  return superlinear(schema) ? unchecked : bounded(validate, schema);
}

/**
 * Runs a validator on input. A recursive schema (a `$ref` to itself) follows the input down, so
 * input nested past the stack throws RangeError: the input's fault ('too_deep'), not a crash.
 */
export function checkInput(v: InputValidator, input: unknown): 'valid' | 'invalid' | 'too_deep' {
  try {
    return v(input) ? 'valid' : 'invalid';
  } catch (err) {
    if (err instanceof RangeError) return 'too_deep';
    throw err;
  }
}

/** `/image must be string; (body) must have required property 'x'` */
export function describeErrors(v: InputValidator): string {
  return (v.errors ?? []).map((e) => `${e.instancePath || '(body)'} ${e.message}`).join('; ');
}
