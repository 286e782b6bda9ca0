// docs/reference/configuration.md: every EMBERS_* variable of core/config.ts's ConfigSchema, its
// type and bounds from the zod schema, its meaning and default from the `/** … @default … */`
// comment above its key. A variable without a comment, or with a schema default its comment does
// not state (or states differently), stops the generator: the reference says it for every one.
import { readFileSync } from 'node:fs';
import { z } from 'zod';
import { ConfigSchema } from '../../core/config.ts';
import { code, document, generatedBanner, outsideCode, prose, table } from './markdown.ts';

export const CONFIG_SOURCE = 'core/config.ts';
const SOURCE_URL = new URL('../../core/config.ts', import.meta.url);

/** What one variable's comment says. */
export interface VariableDoc {
  text: string;
  /** The text after `@default`, if the comment has one. */
  default?: string;
}

export interface Variable extends VariableDoc {
  name: string;
  type: string;
  /** As the reference shows it: the comment's `@default`, else "unset". */
  defaultText: string;
}

/** The `/** … *\/` comment above each key of `export const ConfigSchema = z.object({ … })`, by key. */
export function variableComments(source: string): Map<string, VariableDoc> {
  const start = source.indexOf('export const ConfigSchema = z.object({');
  const end = source.indexOf('\n});', start);
  if (start < 0 || end < 0) throw new Error(`${CONFIG_SOURCE}: cannot find \`export const ConfigSchema = z.object({ … });\``);
  const body = source.slice(start, end);
  const out = new Map<string, VariableDoc>();
  for (const m of body.matchAll(/\/\*\*((?:(?!\*\/)[\s\S])*)\*\/\s*(EMBERS_[A-Z0-9_]+)\s*:/g)) {
    const words = m[1]
      .split('\n')
      .map((line) => line.replace(/^\s*\*?\s?/, '').trim())
      .join(' ')
      .replace(/\s+/g, ' ')
      .trim();
    const [text, ...tags] = words.split(/(?:^|\s+)@(?=[a-z]+\b)/);
    const doc: VariableDoc = { text: text.trim() };
    for (const tag of tags) {
      const [, name, value] = /^([a-z]+)\s*([\s\S]*)$/.exec(tag) ?? [];
      if (name === 'default') doc.default = value.trim();
      else throw new Error(`${CONFIG_SOURCE}: ${m[2]}'s comment has @${name}; the reference reads @default only`);
    }
    out.set(m[2], doc);
  }
  return out;
}

type Def = { type: string } & Record<string, unknown>;
const defOf = (schema: unknown): Def => (schema as { _zod: { def: Def } })._zod.def;
/** The checks on a schema, each as its definition: `min_length`, `greater_than`, `string_format`, `custom`… */
const checksOf = (def: Def): Def[] => ((def.checks as { _zod: { def: Def } }[] | undefined) ?? []).map((c) => c._zod.def);
/** A check's own message ("must be a valid S3 bucket name"), where it was given one. */
const messageOf = (check: Def): string | undefined => {
  const message = typeof check.error === 'function' ? (check.error as (issue: object) => unknown)({}) : undefined;
  return typeof message === 'string' ? message : undefined;
};

const BOOLEAN_WORDS = ['0', '1', 'false', 'true'];
const MiB = 1024 ** 2;

/** 67108864 → `67108864` (64 MiB): byte bounds read better with their unit. */
function quantity(n: number): string {
  if (n >= MiB && n % MiB === 0) {
    const [value, unit] = n % 1024 ** 3 === 0 ? [n / 1024 ** 3, 'GiB'] : [n / MiB, 'MiB'];
    return `${n} (${value} ${unit})`;
  }
  return String(n);
}

/** How a variable's value is read, in words: its zod schema, with defaults, optionals and transforms seen through. */
export function describeType(name: string, schema: unknown): string {
  const def = defOf(schema);
  switch (def.type) {
    case 'default':
    case 'optional':
      return describeType(name, def.innerType);
    case 'pipe': {
      const out = defOf(def.out);
      // `a,b` split by a transform, then checked as a list: the list is what it takes.
      if (out.type === 'array') {
        const min = checksOf(out).find((c) => c.check === 'min_length')?.minimum;
        const element = defOf(out.element);
        const of = element.type === 'enum' ? Object.values(element.entries as Record<string, string>).map((v) => code(v)).join(', ') : describeType(name, out.element);
        return `comma-separated list of ${of}${typeof min === 'number' && min > 1 ? ` (at least ${min})` : ''}`;
      }
      if (out.type === 'transform') return describeType(name, def.in);
      throw new Error(`${name}: cannot describe a pipe into ${out.type}`);
    }
    case 'enum': {
      const values = Object.values(def.entries as Record<string, string>);
      if ([...values].sort().join() === BOOLEAN_WORDS.join()) return 'boolean (`1` or `true`, `0` or `false`)';
      return `one of ${values.map((v) => code(v)).join(', ')}`;
    }
    case 'number': {
      const checks = checksOf(def);
      const integer = checks.some((c) => c.check === 'number_format' && (c.format === 'safeint' || c.format === 'int32'));
      const min = checks.find((c) => c.check === 'greater_than');
      const max = checks.find((c) => c.check === 'less_than' && c.value !== Number.MAX_SAFE_INTEGER);
      for (const c of [min, max]) if (c && !c.inclusive) throw new Error(`${name}: exclusive bounds are not described yet`);
      const kind = integer ? 'integer' : 'number';
      if (min && max) return `${kind}, ${quantity(min.value as number)} to ${quantity(max.value as number)}`;
      if (min) return `${kind} ≥ ${quantity(min.value as number)}`;
      if (max) return `${kind} ≤ ${quantity(max.value as number)}`;
      return kind;
    }
    case 'string': {
      const parts: string[] = [];
      let kind = 'string';
      for (const c of checksOf(def)) {
        if (c.check === 'string_format' && c.format === 'url') kind = 'URL';
        else if (c.check === 'min_length') {
          if ((c.minimum as number) > 1) parts.push(`at least ${c.minimum} characters`);
        } else if (c.check === 'string_format' || c.check === 'custom') {
          const message = messageOf(c);
          if (!message) throw new Error(`${name}: a ${String(c.format ?? c.check)} check with no message cannot be described`);
          parts.push(message.replace(/^must be /, ''));
        } else throw new Error(`${name}: cannot describe the string check ${String(c.check)}`);
      }
      return [kind, ...parts].join(', ');
    }
    default:
      throw new Error(`${name}: cannot describe a ${def.type} schema`);
  }
}

/** The value the schema falls back to, if it has one (under transforms and pipes). */
function schemaDefault(schema: unknown): { value: unknown } | undefined {
  const def = defOf(schema);
  if (def.type === 'default') return { value: def.defaultValue };
  if (def.type === 'pipe') return schemaDefault(def.in);
  return undefined;
}

/** `10 MiB` → 10485760; undefined for words (`the machine's cores`), which cannot be checked. */
function statedNumber(stated: string): number | undefined {
  const m = /^(\d+(?:\.\d+)?)(?:\s*(KiB|MiB|GiB))?(?=$|\s|\()/.exec(stated);
  if (!m) return undefined;
  const unit = { KiB: 1024, MiB: 1024 ** 2, GiB: 1024 ** 3 }[m[2] ?? ''] ?? 1;
  return Number(m[1]) * unit;
}

/**
 * The comment's `@default` against the schema's: a stated number or word must be the schema's;
 * a rule in words (`2 × CPU cores`) is taken as written, as the value depends on the machine.
 */
function checkDefault(name: string, stated: string | undefined, schema: unknown): void {
  const actual = schemaDefault(schema);
  if (!actual) return;
  if (stated === undefined) throw new Error(`${CONFIG_SOURCE}: ${name} has a default in its schema and no @default in its comment: add one (a rule in words where it depends on the machine)`);
  const value = actual.value;
  const first = stated.split(/\s/)[0];
  const agrees =
    typeof value === 'number' ? (statedNumber(stated) ?? value) === value : typeof value === 'boolean' ? first === String(value) : typeof value === 'string' ? first === value : false;
  if (!agrees) throw new Error(`${CONFIG_SOURCE}: ${name}'s comment says @default ${stated}, its schema ${JSON.stringify(value)}`);
}

/** Every variable of the schema, by name, each with its comment: none may lack one. */
export function configVariables(source = readFileSync(SOURCE_URL, 'utf8')): Variable[] {
  const comments = variableComments(source);
  const shape = ConfigSchema.shape as Record<string, z.ZodType>;
  const missing = Object.keys(shape).filter((name) => !comments.get(name)?.text);
  if (missing.length) throw new Error(`${CONFIG_SOURCE}: document ${missing.join(', ')} with a /** … */ comment above the key (what it does, and @default)`);
  return Object.keys(shape)
    .sort()
    .map((name) => {
      const doc = comments.get(name)!;
      checkDefault(name, doc.default, shape[name]);
      return { name, ...doc, type: describeType(name, shape[name]), defaultText: doc.default ?? 'unset' };
    });
}

/** A plain value (`8787`, `info`) as code; a rule in words as prose. */
function defaultMarkdown(v: Variable): string {
  if (v.default === undefined) return 'unset';
  return /^\S+$/.test(v.default) && !v.default.includes('`') ? code(v.default) : linked(v.default);
}

/**
 * Markdown with each variable of the schema it names (outside code) linked to its section of the
 * configuration reference: `page` is that file's path from where the text goes, '' on it.
 */
export function linkVariables(markdown: string, page: string): string {
  const names = new Set(Object.keys(ConfigSchema.shape));
  return outsideCode(markdown, (s) => s.replace(/\bEMBERS_[A-Z0-9_]*[A-Z0-9]\b/g, (name) => (names.has(name) ? `[${name}](${page}#${name.toLowerCase()})` : name)));
}

/** Comment text as Markdown: the variables and repository files it names become links. */
function linked(text: string): string {
  const files = outsideCode(prose(text), (s) => s.replace(/\b(?:docs|core|gateway|scheduler|runtime|platform|cli|sdk|infra)\/[\w./-]+\.(?:md|ts)\b/g, (file) => `[${file}](../../${file})`));
  return linkVariables(files, '');
}

export function configurationReference(source?: string): string {
  const variables = configVariables(source);
  return document([
    generatedBanner(`${CONFIG_SOURCE} (ConfigSchema and the comment above each key)`),
    '# Configuration',
    `Embers reads its configuration from \`EMBERS_*\` environment variables, checked once at start-up by the schema in [${CONFIG_SOURCE}](../../${CONFIG_SOURCE}): a bad value stops start-up with a message naming the variable. An empty value counts as unset. This page lists all ${variables.length}, by name; the \`embers\` CLI's own settings (\`--url\`, \`--key\` and the variables they fall back to) are in [cli.md](cli.md).`,
    table(
      ['variable', 'type', 'default'],
      variables.map((v) => [`[${v.name}](#${v.name.toLowerCase()})`, prose(v.type), defaultMarkdown(v)]),
    ),
    ...variables.map((v) => [`## ${v.name}`, linked(v.text), `Type: ${prose(v.type)}. Default: ${defaultMarkdown(v)}.`].join('\n\n')),
  ]);
}
