// The OpenAPI 3.1 document of every mounted route, generated from the route groups: their zod
// schemas become the parameters, bodies and responses, so it says what the handlers check.
import { z } from 'zod';
import { toJsonSchema, type JsonObject } from './json-schema.ts';
import type { Access, Content, MountedGroup, Operation, ResponseSpec } from './operation.ts';
import { ActingTenantQuery } from '../middleware/auth.ts';

export const OPENAPI_VERSION = '3.1.0';

export const SECURITY_SCHEME = 'bearerAuth';

/** Every error answer's body. */
export const ErrorBodySchema = z
  .object({
    error: z.object({
      code: z.string().describe('what went wrong, for a program: `function_not_found`, `invalid_input`, …'),
      message: z.string().describe('what went wrong and what to do about it, for a person'),
      details: z.unknown().optional().describe('more for a program, where there is more: the failed checks of an input'),
    }),
  })
  .meta({ id: 'Error' });

export type OpenApiDocument = JsonObject & { paths: Record<string, Record<string, JsonObject>>; components: { schemas: Record<string, JsonObject> } & JsonObject };

/** What only the deployment knows: where it answers and which version it runs. */
export interface DocumentInfo {
  serverUrl: string;
  version: string;
}

const ACCESS_WORDS: Record<Access, string> = {
  public: 'Needs no key.',
  optional: 'Needs no key; with one, it answers for the key\'s tenant.',
  key: 'Needs an API key (any scope).',
  run: 'Needs a key with the `run` scope.',
  deploy: 'Needs a key with the `deploy` scope.',
  read: 'Needs a key with the `read` scope.',
  admin: 'Needs the admin key (EMBERS_ADMIN_KEY).',
};

export function buildDocument(mounted: MountedGroup[], info: DocumentInfo): OpenApiDocument {
  const schemas: Record<string, JsonObject> = {};
  /** Schemas by name, once each: the same name for two different schemas is a mistake in a route module. */
  const collect = (found: Record<string, JsonObject>) => {
    for (const [name, schema] of Object.entries(found)) {
      if (name in schemas && JSON.stringify(schemas[name]) !== JSON.stringify(schema)) throw new Error(`two different schemas are named ${name}`);
      schemas[name] = schema;
    }
  };
  const convert = (content: Content, io: 'input' | 'output'): JsonObject => {
    if ('jsonSchema' in content) return content.jsonSchema;
    const { schema, components } = toJsonSchema(content, io);
    collect(components);
    return schema;
  };
  const media = (content: Record<string, Content>, io: 'input' | 'output') => Object.fromEntries(Object.entries(content).map(([type, c]) => [type, { schema: convert(c, io) }]));
  const errorRef = convert(ErrorBodySchema, 'output');

  const paths: OpenApiDocument['paths'] = {};
  const ids = new Set<string>();
  for (const { prefix, group } of mounted) {
    for (const op of group.operations) {
      if (ids.has(op.id)) throw new Error(`two operations have the id ${op.id}`);
      ids.add(op.id);
      const path = openApiPath(prefix, op.path);
      const item = (paths[path] ??= {});
      if (item[op.method]) throw new Error(`${op.method.toUpperCase()} ${path} is described twice`);
      item[op.method] = {
        operationId: op.id,
        summary: op.summary,
        description: [op.description, ACCESS_WORDS[op.access]].filter(Boolean).join('\n\n'),
        tags: [group.tag],
        'x-embers-access': op.access,
        security: op.access === 'public' ? [] : op.access === 'optional' ? [{}, { [SECURITY_SCHEME]: [] }] : [{ [SECURITY_SCHEME]: [] }],
        parameters: parameters(op, path, (s) => convert(s, 'input')),
        ...(op.body ? { requestBody: { ...(op.body.description ? { description: op.body.description } : {}), required: op.body.required ?? true, content: media(op.body.content, 'input') } } : {}),
        responses: responses(op, (r) => ({
          description: r.description,
          ...(r.headers ? { headers: Object.fromEntries(Object.entries(r.headers).map(([name, description]) => [name, { description, schema: { type: 'string' } }])) } : {}),
          ...(r.content ? { content: media(r.content, 'output') } : {}),
        }), errorRef),
      };
    }
  }
  return {
    // The default dialect (OpenAPI 3.1's base: JSON Schema 2020-12 and a few keywords): Swagger UI shows no other.
    openapi: OPENAPI_VERSION,
    info: {
      title: 'Embers',
      version: info.version,
      description:
        'Serverless inference on your own machines. `/v1` routes take `Authorization: Bearer <key>`: a tenant\'s API key, or the admin key, which acts for the default tenant unless `?tenant=<id>` names another. Errors answer `{ "error": { "code", "message", "details"? } }`. Fetched with a key, this document also lists that tenant\'s deployed functions, each under its own `POST /v1/run/<name>` with its input schema.',
    },
    servers: [{ url: info.serverUrl }],
    security: [{ [SECURITY_SCHEME]: [] }],
    tags: [...new Map(mounted.map(({ group }) => [group.tag, { name: group.tag, description: group.description }])).values()],
    paths,
    components: {
      schemas,
      securitySchemes: {
        [SECURITY_SCHEME]: { type: 'http', scheme: 'bearer', description: 'An API key (`emb_…`) or the admin key (EMBERS_ADMIN_KEY).' },
      },
    },
  };
}

/** `/v1/functions` + `/:name` → `/v1/functions/{name}`. */
export function openApiPath(prefix: string, path: string): string {
  const joined = `${prefix}${path === '/' ? '' : path}` || '/';
  return joined.replace(/:([A-Za-z_][A-Za-z0-9_]*)/g, '{$1}');
}

function parameters(op: Operation, path: string, convert: (s: z.ZodType) => JsonObject): JsonObject[] {
  const inPath = [...path.matchAll(/\{([^}]+)\}/g)].map((m) => m[1]);
  const described = Object.keys(op.params?.shape ?? {});
  if (inPath.join() !== described.join()) throw new Error(`${op.id}: the path has parameters [${inPath}], its params schema [${described}]`);
  const out: JsonObject[] = [];
  const add = (where: 'path' | 'query' | 'header', schema: z.ZodObject | undefined) => {
    if (!schema) return;
    const converted = convert(schema) as { properties?: Record<string, JsonObject>; required?: string[] };
    for (const [name, property] of Object.entries(converted.properties ?? {})) {
      const { description, ...rest } = property;
      out.push({ name, in: where, required: where === 'path' || (converted.required ?? []).includes(name), ...(description ? { description } : {}), schema: rest });
    }
  };
  add('path', op.params);
  add('query', op.query);
  if (op.actsForTenant && !op.query?.shape.tenant) add('query', ActingTenantQuery);
  add('header', op.headers);
  return out;
}

/** The operation's answers, and the error answers it can give: its own, and those `access` and `?tenant=` bring. */
function responses(op: Operation, response: (r: ResponseSpec) => JsonObject, errorSchema: JsonObject): Record<string, JsonObject> {
  const errors: Record<string, string> = {};
  if (op.actsForTenant) errors[400] = '`?tenant=` is not a tenant id';
  const keyed = op.access !== 'public' && op.access !== 'optional';
  if (keyed) errors[401] = 'no key, a malformed Authorization header, or a key that is unknown or revoked';
  if (op.access === 'admin') errors[403] = 'the key is not the admin key';
  else if (keyed && op.access !== 'key') errors[403] = `the key lacks the \`${op.access}\` scope${op.actsForTenant ? ', or a tenant key named another tenant in `?tenant=`' : ''}`;
  else if (op.actsForTenant) errors[403] = 'a tenant key named another tenant in `?tenant=`';
  for (const [status, why] of Object.entries(op.errors ?? {})) errors[status] = errors[status] && !errors[status].includes(why) ? `${why}; or ${errors[status]}` : why;
  errors['5XX'] = 'the platform could not answer: Redis or S3 out of reach (503 `unavailable`), or an internal error (500)';
  const out: Record<string, JsonObject> = {};
  for (const [status, r] of Object.entries(op.responses)) out[status] = response(r);
  for (const [status, why] of Object.entries(errors)) out[status] = { description: why, content: { 'application/json': { schema: errorSchema } } };
  return out;
}
