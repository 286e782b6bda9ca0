// A tenant's deployed functions in the document: each under its own `POST /v1/run/<name>`, the
// general run operation with the function's stored input schema as its body.
import { embedSchema, type JsonObject } from './json-schema.ts';
import type { OpenApiDocument } from './document.ts';

/** Where the general run operation sits; the paths this adds are its instances. */
export const RUN_PATH = '/v1/run/{name}';

export const FUNCTIONS_TAG = 'deployed';

/** What the document needs of a deployed function's active version. */
export interface DeployedFunction {
  /** The name its tenant knows it by. */
  name: string;
  version: string;
  /** JSON Schema 2020-12, made from the function's zod at deploy. */
  inputSchema: Record<string, unknown>;
  /** The input field a non-JSON body fills. */
  binaryInput?: string;
}

/**
 * `base` with a path for each function (base is left as it is: it is shared). Each function's
 * input schema sits under components as `function.<name>.input`, its own `$ref`s rewritten to
 * point there.
 */
export function withFunctions(base: OpenApiDocument, functions: DeployedFunction[]): OpenApiDocument {
  if (functions.length === 0) return base;
  const run = base.paths[RUN_PATH]?.post as JsonObject | undefined;
  if (!run) throw new Error(`the document has no POST ${RUN_PATH} to describe functions after`);
  const paths = { ...base.paths };
  const schemas = { ...base.components.schemas };
  for (const fn of [...functions].sort((a, b) => a.name.localeCompare(b.name))) {
    const component = `function.${fn.name}.input`;
    const ref = `#/components/schemas/${component}`;
    schemas[component] = embedSchema(fn.inputSchema, ref);
    const content: Record<string, JsonObject> = { 'application/json': { schema: { $ref: ref } } };
    if (fn.binaryInput !== undefined) {
      content['application/octet-stream'] = { schema: { type: 'string', format: 'binary', description: `the bytes of \`${fn.binaryInput}\`; send them with their own Content-Type (image/png, audio/wav, …): any type but JSON and text is read as bytes` } };
    }
    paths[`/v1/run/${fn.name}`] = {
      post: {
        ...run,
        // Function names are unique per tenant and hold no "_", which Swagger UI's deep links read as a space.
        operationId: `run-${fn.name}`,
        summary: `Run ${fn.name}`,
        description: `Runs ${fn.name} (version ${fn.version} when this document was made) on the body${fn.binaryInput !== undefined ? `: its input as JSON, or the bytes of its \`${fn.binaryInput}\` with their own Content-Type` : ', its input as JSON'}.\n\n${String(run.description ?? '')}`,
        tags: [FUNCTIONS_TAG],
        parameters: ((run.parameters ?? []) as JsonObject[]).filter((p) => !(p.in === 'path' && p.name === 'name')),
        requestBody: { required: true, content },
      },
    };
  }
  // First: what a caller came for.
  const tags = [{ name: FUNCTIONS_TAG, description: 'The functions the calling key\'s tenant has deployed, each with its input schema.' }, ...((base.tags ?? []) as JsonObject[])];
  return { ...base, tags, paths, components: { ...base.components, schemas } };
}
