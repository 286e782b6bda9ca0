// docs/reference/http-api.md: every route of the gateway's OpenAPI document (gateway/openapi/,
// generated from the route modules' zod schemas), read from the app itself on stand-in parts:
// nothing listens and nothing is reached, as the document depends on no deployment. Routes by
// tag in the document's order; its named schemas, by name, after them.
import pino from 'pino';
import { createApp } from '../../gateway/app.ts';
import type { GatewayDeps } from '../../gateway/deps.ts';
import type { OpenApiDocument } from '../../gateway/openapi/document.ts';
import { plainTarget } from '../../core/redis-target.ts';
import { linkVariables } from './configuration.ts';
import { code, document, generatedBanner, prose as plain, table } from './markdown.ts';

/** Prose, with the platform's variables it names linked to the configuration reference. */
const prose = (text: string): string => linkVariables(plain(text), 'configuration.md');

export const HTTP_SOURCE = 'the OpenAPI document of gateway/openapi/ (the route modules\' zod schemas)';
/** Where the gateway serves its document: requested here, and checked against the document's own operation. */
const DOCUMENT_PATH = '/v1/openapi.json';

type Schema = Record<string, unknown> & {
  $ref?: string;
  type?: string | string[];
  description?: string;
  properties?: Record<string, Schema>;
  required?: string[];
  items?: Schema;
  additionalProperties?: boolean | Schema;
  anyOf?: Schema[];
  oneOf?: Schema[];
  allOf?: Schema[];
  enum?: unknown[];
  const?: unknown;
  format?: string;
  default?: unknown;
};
interface Parameter { name: string; in: string; required: boolean; description?: string; schema: Schema }
interface Response { description: string; headers?: Record<string, { description: string }>; content?: Record<string, { schema: Schema }> }
interface Operation {
  operationId: string;
  summary: string;
  description?: string;
  tags: string[];
  parameters: Parameter[];
  requestBody?: { description?: string; required?: boolean; content: Record<string, { schema: Schema }> };
  responses: Record<string, Response>;
}

/** The document a caller without a key gets: the routes alone, asked of the app as a caller would. */
export async function openApiDocument(): Promise<OpenApiDocument> {
  const deps = {
    publicUrl: 'http://embers.invalid',
    redisTarget: plainTarget('redis://embers.invalid:6379'),
    functions: { onChange: () => {} },
    log: pino({ enabled: false }),
  } as unknown as GatewayDeps;
  const res = await createApp(deps).request(DOCUMENT_PATH);
  if (res.status !== 200) throw new Error(`GET ${DOCUMENT_PATH} answered ${res.status}: ${await res.text()}`);
  return (await res.json()) as OpenApiDocument;
}

const refName = (ref: string): string => ref.replace(/^#\/components\/schemas\//, '');

/** A schema in a few words: `Job`, `string[]`, `"queued" | "running"`, `map of number`. */
export function typeOf(s: Schema): string {
  if (s.$ref) return refName(s.$ref);
  if (s.const !== undefined) return JSON.stringify(s.const);
  if (s.enum) return s.enum.map((v) => JSON.stringify(v)).join(' | ');
  const alternatives = s.anyOf ?? s.oneOf;
  if (alternatives) return [...new Set(alternatives.map(typeOf))].join(' | ');
  if (s.allOf) return s.allOf.map(typeOf).join(' & ');
  if (Array.isArray(s.type)) return s.type.map((type) => typeOf({ ...s, type })).join(' | ');
  switch (s.type) {
    case 'string':
      return s.format === 'binary' ? 'bytes' : s.format ? `string (${s.format})` : 'string';
    case 'integer':
    case 'number':
    case 'boolean':
    case 'null':
      return s.type;
    case 'array': {
      const item = s.items ? typeOf(s.items) : 'any';
      return item.includes(' ') ? `(${item})[]` : `${item}[]`;
    }
    case 'object':
      if (!s.properties && s.additionalProperties && typeof s.additionalProperties === 'object') return `map of ${typeOf(s.additionalProperties)}`;
      return 'object';
    default:
      return 'any JSON';
  }
}

/** What a value may be beyond its type: bounds, lengths and the default. */
function limits(s: Schema): string[] {
  const out: string[] = [];
  const num = (key: string) => (typeof s[key] === 'number' ? (s[key] as number) : undefined);
  const range = (min: number | undefined, max: number | undefined, unit: string, units: string) => {
    const noun = (n: number) => (n === 1 ? unit : units);
    if (min !== undefined && max !== undefined) out.push(`${min} to ${max} ${units}`);
    else if (min !== undefined) out.push(`at least ${min} ${noun(min)}`);
    else if (max !== undefined) out.push(`at most ${max} ${noun(max)}`);
  };
  const [min, max] = [num('minimum'), num('maximum')];
  if (min !== undefined && max !== undefined) out.push(`${min} to ${max}`);
  else if (min !== undefined) out.push(`≥ ${min}`);
  else if (max !== undefined) out.push(`≤ ${max}`);
  if (num('exclusiveMinimum') !== undefined) out.push(`> ${num('exclusiveMinimum')}`);
  if (num('exclusiveMaximum') !== undefined) out.push(`< ${num('exclusiveMaximum')}`);
  range(num('minLength'), num('maxLength'), 'character', 'characters');
  range(num('minItems'), num('maxItems'), 'item', 'items');
  if (s.default !== undefined) out.push(`default ${code(JSON.stringify(s.default))}`);
  return out;
}

const sentence = (parts: (string | undefined)[]): string => parts.filter(Boolean).join('; ');

/** An object's fields, nested objects and arrays of objects spelled out (`spec.name`, `versions[].version`). */
function fieldRows(s: Schema, prefix = '', depth = 0): string[][] {
  const required = new Set(s.required ?? []);
  return Object.entries(s.properties ?? {}).flatMap(([name, field]) => {
    const path = `${prefix}${name}`;
    const row = [code(path), typeCell(field), required.has(name) ? 'yes' : '', prose(sentence([field.description, ...limits(field)]))];
    const inner = field.type === 'array' && field.items?.properties ? { schema: field.items, prefix: `${path}[].` } : field.properties ? { schema: field, prefix: `${path}.` } : undefined;
    return inner && depth < 3 ? [row, ...fieldRows(inner.schema, inner.prefix, depth + 1)] : [row];
  });
}

const fieldTable = (s: Schema): string => table(['field', 'type', 'required', 'description'], fieldRows(s));

/** A schema's type as Markdown: a named schema (or a list of one) links to its section. */
function typeCell(s: Schema): string {
  const ref = s.$ref ?? (s.type === 'array' ? s.items?.$ref : undefined);
  return ref ? `[${code(typeOf(s))}](${anchor(schemaHeading(refName(ref)))})` : code(typeOf(s));
}

/** `{ id, status, url }`: an inline object's keys, optional ones marked; else its type. */
function shape(s: Schema): string {
  if (!s.properties) return typeCell(s);
  const required = new Set(s.required ?? []);
  return code(`{ ${Object.keys(s.properties).map((k) => (required.has(k) ? k : `${k}?`)).join(', ')} }`);
}

/** GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens. */
const anchor = (heading: string): string => `#${heading.toLowerCase().replace(/[^\p{L}\p{N}\s_-]/gu, '').replace(/\s/g, '-')}`;
const operationHeading = (method: string, path: string): string => `${method.toUpperCase()} ${path}`;
const schemaHeading = (name: string): string => `Schema: ${name}`;

function operationSection(method: string, path: string, op: Operation): string {
  const blocks = [`### ${code(operationHeading(method, path))}`, `**${prose(op.summary)}**`, op.description && prose(op.description)];
  if (op.parameters.length) {
    blocks.push(
      table(
        ['parameter', 'in', 'type', 'required', 'description'],
        op.parameters.map((p) => [code(p.name), p.in, typeCell(p.schema), p.required ? 'yes' : '', prose(sentence([p.description, ...limits(p.schema)]))]),
      ),
    );
  }
  const body = op.requestBody;
  if (body) {
    blocks.push(`Request body${body.required === false ? ' (optional)' : ''}:${body.description ? ` ${prose(body.description)}` : ''}`);
    for (const [type, { schema }] of Object.entries(body.content)) {
      if (schema.properties) blocks.push(`${code(type)}:`, fieldTable(schema));
      else blocks.push(`${code(type)}: ${typeCell(schema)}${schema.description ? `, ${prose(schema.description)}` : ''}`);
    }
  }
  blocks.push(
    table(
      ['status', 'description', 'body'],
      Object.entries(op.responses).map(([status, r]) => [
        status,
        prose(r.description) + (r.headers ? ` (headers: ${Object.entries(r.headers).map(([name, h]) => `${code(name)}, ${prose(h.description)}`).join('; ')})` : ''),
        Object.entries(r.content ?? {})
          .map(([type, { schema }]) => `${code(type)}: ${shape(schema)}`)
          .join('<br>'),
      ]),
    ),
  );
  return blocks.filter(Boolean).join('\n\n');
}

/** The operation `id` in the document, by method and path: the reference names where it lives. */
function find(doc: OpenApiDocument, id: string): { method: string; path: string } {
  for (const [path, item] of Object.entries(doc.paths)) for (const [method, op] of Object.entries(item)) if (op.operationId === id) return { method, path };
  throw new Error(`the OpenAPI document has no operation ${id}`);
}

export async function httpApiReference(doc?: OpenApiDocument): Promise<string> {
  doc ??= await openApiDocument();
  const self = find(doc, 'getOpenApiDocument');
  if (self.path !== DOCUMENT_PATH) throw new Error(`the document is served at ${self.path}, not ${DOCUMENT_PATH}: change DOCUMENT_PATH`);
  const page = find(doc, 'getDocsPage');
  const info = doc.info as { description: string };
  const tags = doc.tags as { name: string; description: string }[];
  const operations = Object.entries(doc.paths).flatMap(([path, item]) => Object.entries(item).map(([method, op]) => ({ path, method, op: op as unknown as Operation })));
  const auth = (doc.components.securitySchemes as Record<string, { description: string }>).bearerAuth;
  const byTag = (tag: string) => operations.filter(({ op }) => op.tags[0] === tag);
  const untagged = operations.filter(({ op }) => !tags.some((t) => t.name === op.tags[0]));
  if (untagged.length) throw new Error(`operations under no listed tag: ${untagged.map(({ op }) => op.operationId).join(', ')}`);
  const schemas = Object.entries(doc.components.schemas as Record<string, Schema>).sort(([a], [b]) => (a < b ? -1 : 1));

  const headings = [...tags.map((t) => t.name), ...operations.map(({ method, path }) => operationHeading(method, path)), 'Schemas', ...schemas.map(([name]) => schemaHeading(name))];
  const anchors = headings.map(anchor);
  const twice = anchors.filter((a, i) => anchors.indexOf(a) !== i);
  if (twice.length) throw new Error(`headings that would share an anchor: ${twice.join(', ')}`);

  return document([
    generatedBanner(HTTP_SOURCE),
    '# HTTP API',
    prose(info.description),
    `Authentication (${code('Authorization: Bearer <key>')}): ${prose(auth.description)} Each operation says which key it needs; its 401 and 403 answers follow from that.`,
    `The whole document, machine-readable (OpenAPI ${String(doc.openapi)}), is served at ${code(`${self.method.toUpperCase()} ${self.path}`)} (no key needed), and shown as an interactive page at ${code(page.path)}. This page lists the routes alone, ${operations.length} operations in ${tags.length} groups; a deployed function's own path, with its input schema, is in the document fetched with a key.`,
    table(
      ['group', 'operation', 'summary'],
      tags.flatMap((t) => byTag(t.name).map(({ method, path, op }) => [`[${t.name}](${anchor(t.name)})`, `[${code(operationHeading(method, path))}](${anchor(operationHeading(method, path))})`, prose(op.summary)])),
    ),
    ...tags.flatMap((t) => [`## ${t.name}\n\n${prose(t.description)}`, ...byTag(t.name).map(({ method, path, op }) => operationSection(method, path, op))]),
    '## Schemas\n\nThe named schemas the operations above refer to, by name.',
    ...schemas.map(([name, s]) => [`### ${schemaHeading(name)}`, s.description && prose(s.description), s.properties ? fieldTable(s) : code(typeOf(s))].filter(Boolean).join('\n\n')),
  ]);
}
