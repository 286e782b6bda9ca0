// Deploy and manage functions: POST/GET /v1/functions, GET/DELETE /v1/functions/:name.
import { Hono, type Context } from 'hono';
import { limitBody } from '../middleware/body-limit.ts';
import { z } from 'zod';
import { DeployRequestSchema, DeploySpecSchema, errorBody, FunctionName, type Manifest } from '../../core/contracts.ts';
import { takeUnstarted } from '../../core/live-queue.ts';
import { answerUnrun } from '../../core/jobs.ts';
import { DEFAULT_TENANT, plainName, qualifiedName, versionKey } from '../../core/names.ts';
import { ApiError, functionNotFound } from '../errors.ts';
import { readJson } from '../request-body.ts';
import { headOwned } from '../owned-objects.ts';
import { compileInputSchema, schemaTooLarge } from '../../core/validate.ts';
import { actingTenant, requireScope } from '../middleware/auth.ts';
import { readQuery } from '../request-query.ts';
import type { RouteGroup } from '../openapi/operation.ts';
import { replicasOf } from '../replicas.ts';
import { callEdges, CALLS_SHOWN } from '../call-edges.ts';
import { BARE_MODEL_BUNDLE, bareModelSpec } from '../bare-model.ts';
import type { GatewayDeps, GatewayEnv } from '../deps.ts';
import { keys, liveStream } from '../../core/keys.ts';
import { tailEvents } from '../tail-events.ts';
import type { TailFilterSpec } from '../tail-filter.ts';
import type { Routing } from '../../core/traffic.ts';
import { describeTraffic, RolloutSchema, SplitSchema } from './versions.ts';

const FunctionParams = z.object({ name: FunctionName });

const DeployQuery = z.object({
  activate: z
    .enum(['true', 'false'], { error: 'activate must be true or false' })
    .optional()
    .describe('false: store the version and leave traffic as it is (a function\'s first version is made active all the same); roll it out with `PUT …/traffic` or `POST …/rollouts`'),
});

const DeleteQuery = z.object({
  force: z
    .enum(['true', 'false'], { error: 'force must be true or false' })
    .optional()
    .describe('true: delete even while requests are queued or running; those not started are answered 410 `function_deleted`'),
});

/** A version as the API shows it: the manifest less pricing and queue limit. */
const FunctionVersionSchema = DeploySpecSchema.pick({ models: true, batching: true, scaling: true, timeoutMs: true, inputSchema: true, binaryInput: true, kind: true, tensors: true, vars: true })
  .extend({
    name: FunctionName,
    version: z.string().describe('v1, v2, …'),
    createdAt: z.iso.datetime(),
    bundle: z.object({ key: z.string(), sha256: z.string(), bytes: z.number().int() }),
  })
  .meta({ id: 'FunctionVersion' });

const DeployResultSchema = z.object({
  ...FunctionVersionSchema.shape,
  tenant: z.string(),
  unchanged: z.boolean().describe('true: this bundle and spec were already the active version, or with activate=false a stored one (answered 200, not 201)'),
  activated: z.boolean().describe('whether this version is now the active one'),
  endpoint: z.string().describe('where to run it'),
});

const FunctionSummarySchema = z.object({ name: FunctionName, active: z.string(), versions: z.number().int(), updatedAt: z.string(), tenant: z.string() });

const CallEdgeSchema = z.object({ name: FunctionName, lastAt: z.iso.datetime().describe('the last call between the two (recorded at most every 10 s)') }).meta({ id: 'CallEdge' });

const FunctionDetailSchema = z.object({
  name: FunctionName,
  tenant: z.string(),
  active: z.string().describe('the active version'),
  endpoint: z.string(),
  manifest: FunctionVersionSchema,
  versions: z.array(z.object({ version: z.string(), createdAt: z.string(), bundleBytes: z.number().int(), rolledFor: z.literal('secrets').optional().describe('made by a change of its secrets, not a deploy: the version before\'s bundle and spec') })),
  replicas: z.array(z.unknown()).describe('its replicas\' latest heartbeats'),
  scale: z.object({ desired: z.number(), inFlight: z.number(), ready: z.number(), reason: z.string(), at: z.string() }).nullable().describe('the scheduler\'s latest decision'),
  coldStarts: z.array(z.unknown()).describe('its latest cold starts, phase by phase, newest first'),
  split: SplitSchema.nullable().describe('a second version taking a share of its requests (`embers versions`)'),
  rollout: RolloutSchema.nullable().describe('how its last automatic rollout ended'),
  calls: z
    .object({
      out: z.array(CallEdgeSchema).describe('the functions it called'),
      in: z.array(CallEdgeSchema).describe('the functions that called it'),
    })
    .describe(`its calls (\`ctx.call\`) to and from its tenant's functions, itself included, in the last hour, newest first, ${CALLS_SHOWN} each at most`),
});

const TailQuery = z.object({
  status: z
    .string()
    .regex(/^(ok|error|[1-5]\d\d)$/, { error: 'status must be ok, error or a status code such as 404' })
    .optional()
    .describe('only requests that ended so, with their log lines: `ok` (below 400), `error` (400 and up) or a status code'),
  version: z.string().max(32).optional().describe('only lines of this version (v1, v2, …)'),
  search: z.string().min(1).max(200).optional().describe('only log lines whose message, fields or request id contain this text, and those requests\' summaries'),
});

const DeletedSchema = z.object({ deleted: FunctionName, dropped: z.number().int().optional().describe('with force: the requests not started, answered 410') });

export function functionRoutes(deps: GatewayDeps) {
  const app = new Hono<GatewayEnv>();
  const { registry, redis } = deps;

  app.post(
    '/',
    limitBody(deps.maxBundleBytes, `deploy body is over ${deps.maxBundleBytes} bytes (EMBERS_MAX_BUNDLE_BYTES)`),
    async (c) => {
      requireScope(c, 'deploy');
      const { activate } = readQuery(c, DeployQuery);
      const parsed = DeployRequestSchema.safeParse(await readJson(c, deps.maxJsonDepth));
      if (!parsed.success) throw new ApiError(400, 'invalid_deploy', `deploy request is invalid: ${z.prettifyError(parsed.error)}`, parsed.error.issues);
      let { spec } = parsed.data;
      const tenant = actingTenant(c);
      if (tenant !== DEFAULT_TENANT && !(await deps.tenants.getTenant(tenant))) throw new ApiError(404, 'tenant_not_found', `no tenant with id "${tenant}"`);
      const bundle = spec.kind === 'model' ? bareModelBundle(parsed.data.bundle) : bundleOf(parsed.data.bundle);
      const oversized = schemaTooLarge(spec.inputSchema);
      if (oversized) throw new ApiError(400, 'invalid_deploy', `spec.inputSchema ${oversized}`);
      try {
        compileInputSchema(spec.inputSchema);
      } catch (err) {
        throw new ApiError(400, 'invalid_deploy', `spec.inputSchema is not a valid JSON Schema (2020-12): ${(err as Error).message}`);
      }
      // Only the tenant's own models: another's, or any object not its own, is "does not exist".
      for (const [handle, uri] of Object.entries(spec.models)) {
        const found = await headOwned(deps, tenant, uri, `spec.models.${handle}`).catch((err) => {
          if (err instanceof ApiError) throw err;
          throw new ApiError(400, 'model_unreachable', `model ${handle} (${uri}) cannot be read: ${(err as Error).message}`);
        });
        if (!found) throw new ApiError(400, 'model_not_found', `model ${handle}: ${uri} does not exist; upload it with \`embers models upload\` or reference a local file`);
      }
      if (spec.kind === 'model') spec = await bareModelSpec(deps, tenant, spec);
      const key = (await registry.find(tenant, spec.name)) ?? qualifiedName(tenant, spec.name);
      // Only a default-tenant name another tenant deployed while names were global is taken.
      if ((await registry.claim(key, tenant)) !== tenant) {
        throw new ApiError(409, 'name_taken', `"${spec.name}" is held by a function deployed before function names were per tenant; pick another name`);
      }
      const manifest = await registry.deploy({ ...spec, name: key }, bundle, { activate: activate !== 'false' });
      deps.functions.invalidate(key);
      const origin = deps.publicUrl;
      const unchanged = manifest.unchanged === true;
      return c.json({ ...describeVersion(manifest), tenant, unchanged, activated: manifest.activated, endpoint: `${origin}/v1/run/${spec.name}` } satisfies z.output<typeof DeployResultSchema>, unchanged ? 200 : 201);
    },
  );

  app.get('/', async (c) => {
    requireScope(c, 'read');
    const tenant = actingTenant(c);
    return c.json({ functions: (await registry.list()).filter((f) => f.tenant === tenant).map((f) => ({ ...f, name: plainName(f.name) })) } satisfies { functions: z.output<typeof FunctionSummarySchema>[] });
  });

  app.get('/:name', async (c) => {
    requireScope(c, 'read');
    const { name, key, tenant } = await visible(c);
    const [versions, active, routing] = await Promise.all([registry.versions(key), registry.active(key), registry.routing(key)]);
    if (!active || !routing) throw functionNotFound(name);
    return c.json({
      name,
      tenant,
      active: active.version,
      endpoint: `${deps.publicUrl}/v1/run/${name}`,
      manifest: describeVersion(active),
      versions: versions.map((v) => ({ version: v.version, createdAt: v.createdAt, bundleBytes: v.bundle.bytes, ...(v.rolledFor ? { rolledFor: v.rolledFor } : {}) })),
      replicas: await replicasOf(redis, key),
      scale: await redis.hget(keys.desired, key).then((r) => (r ? JSON.parse(r) : null)),
      coldStarts: (await redis.lrange(keys.coldStarts(key), 0, 19)).map((r) => JSON.parse(r)),
      ...describeTraffic(routing),
      calls: await callEdges(redis, callKeys(key, routing), tenant, (k) => registry.owner(k)),
    } satisfies z.output<typeof FunctionDetailSchema>);
  });

  app.get('/:name/tail', async (c) => {
    requireScope(c, 'read');
    const { name, key } = await visible(c);
    const { status, version, search } = readQuery(c, TailQuery);
    const spec: TailFilterSpec = { ...(version ? { version } : {}), ...(search ? { search } : {}) };
    if (status) spec.status = status === 'ok' || status === 'error' ? status : Number(status);
    return tailEvents(c, deps, { key, name }, spec);
  });

  app.delete('/:name', async (c) => {
    requireScope(c, 'deploy');
    const { name, key } = await visible(c);
    const { force } = readQuery(c, DeleteQuery);
    // Requests still queued would never be answered once the function is gone: refused unless forced.
    let dropped = 0;
    const split = (await registry.routing(key))?.split;
    const answer = async () => {
      try {
        // A split's version has a stream of its own (versionKey).
        for (const k of [key, ...(split ? [versionKey(key, split.version)] : [])]) dropped += await answerUnstarted(deps, k);
      } catch (err) {
        throw new ApiError(503, 'unavailable', `${name} no longer takes requests, but answering the requests still queued for it failed (${(err as Error).message}); run the same delete again to finish`);
      }
    };
    const removed = await registry.remove(key, force === 'true' ? { beforeDelete: answer } : { unlessQueuedIn: liveStream(key) });
    if (removed === 'not_found') throw functionNotFound(name);
    if (removed === 'redeployed') throw new ApiError(409, 'function_redeployed', `${name} was deployed again while it was being deleted; the new deployment stays (delete it again to remove it)`);
    if (removed !== 'removed') {
      throw new ApiError(409, 'function_busy', `${name} has ${removed.queued} request(s) queued or running; wait for them to finish, or delete with ?force=true (\`embers functions delete ${name} --force\`), which answers the ones not yet started 410`);
    }
    deps.functions.forget(key);
    return c.json({ deleted: name, ...(force === 'true' ? { dropped } : {}) } satisfies z.output<typeof DeletedSchema>);
  });

  /** The acting tenant's :name function and its key: another tenant's function is as unknown as a missing one. */
  async function visible(c: Context<GatewayEnv>): Promise<{ name: string; key: string; tenant: string }> {
    const name = checkName(c.req.param('name') ?? '');
    const tenant = actingTenant(c);
    const key = await registry.find(tenant, name);
    if (!key) throw functionNotFound(name);
    return { name, key, tenant };
  }

  return app;
}

/**
 * A force-deleted function's requests that no replica has started: an async job ends failed
 * (410, its webhook called), a waiting caller gets 410; the entries go (takeUnstarted: taken out
 * in the same call that looks, so none is both answered here and run). Those a replica is running
 * are left to it: it answers them as it would have, within its stop's grace (15 s); what it still
 * holds when it stops, its node agent answers (500 function_deleted). Answering one may fail
 * (Redis gone) without stopping the rest. Resolves with how many were taken out.
 */
async function answerUnstarted(deps: GatewayDeps, key: string): Promise<number> {
  const body = JSON.stringify(errorBody('function_deleted', `${plainName(key)} was deleted before this request ran`));
  const answerer = { redis: deps.redis, jobs: deps.jobs, webhooks: deps.webhookQueue, by: 'gateway' };
  let dropped = 0;
  for await (const data of takeUnstarted(deps.redis, key)) {
    dropped++;
    if (!data) continue;
    try {
      await answerUnrun(answerer, data, 410, body, true);
    } catch (err) {
      deps.log.warn({ fn: key, job: data.job, rid: data.rid, err: (err as Error).message }, 'could not answer a request of a deleted function');
    }
  }
  return dropped;
}

/** The function's bundle, from its base64: JavaScript sent as it is (Node skips what is not base64 as it decodes) is refused. */
function bundleOf(base64: string | undefined): Buffer {
  const bundle = Buffer.from(base64 ?? '', 'base64');
  if (base64 === undefined || bundle.length === 0 || bundle.toString('base64').replace(/=+$/, '') !== base64.replace(/\s+/g, '').replace(/=+$/, '').replace(/-/g, '+').replace(/_/g, '/')) {
    throw new ApiError(400, 'invalid_deploy', 'bundle must be the function\'s JavaScript bundle as base64 (`embers deploy` builds and encodes it)');
  }
  return bundle;
}

function bareModelBundle(base64: string | undefined): Buffer {
  if (base64 !== undefined) throw new ApiError(400, 'invalid_deploy', 'a bare model (spec.kind "model") has no bundle: the platform runs it; leave out "bundle"');
  return BARE_MODEL_BUNDLE;
}

/**
 * The keys a function's call edges are under: its own, and those of the versions that took a
 * share of its traffic lately (its split, its active and previous versions, which may have been
 * split before), as their replicas record edges under the key they serve.
 */
function callKeys(key: string, routing: Routing): string[] {
  const versions = new Set([routing.split?.version, routing.active, routing.previous].filter((v): v is string => !!v));
  return [key, ...[...versions].map((v) => versionKey(key, v))];
}

/** A malformed name is as unknown as a missing one. */
function checkName(name: string): string {
  if (!FunctionParams.shape.name.safeParse(name).success) throw functionNotFound(name, 'malformed');
  return name;
}

function describeVersion(m: Manifest): z.output<typeof FunctionVersionSchema> {
  return {
    name: plainName(m.name),
    version: m.version,
    createdAt: m.createdAt,
    models: m.models,
    batching: m.batching,
    scaling: m.scaling,
    timeoutMs: m.timeoutMs,
    inputSchema: m.inputSchema,
    vars: m.vars ?? {},
    ...(m.binaryInput ? { binaryInput: m.binaryInput } : {}),
    ...(m.kind ? { kind: m.kind } : {}),
    ...(m.tensors ? { tensors: m.tensors } : {}),
    bundle: m.bundle,
  };
}

const NAME_ERRORS = { 404: '`function_not_found`: no function of this tenant by that name (another tenant\'s is as unknown)' };

export const functionOperations: RouteGroup = {
  tag: 'functions',
  description: 'Deploy, list, inspect and delete functions (`embers deploy` and `embers functions`).',
  operations: [
    {
      method: 'post',
      path: '/',
      id: 'deployFunction',
      summary: 'Deploy a function',
      description: 'Stores a new immutable version and makes it active (ending any split of its traffic), as `embers deploy` does (it bundles the handler file and reads its spec); with `activate=false` only stores it (`embers deploy --no-activate`). Deploying exactly the active version again changes nothing and answers 200.',
      access: 'deploy',
      actsForTenant: true,
      query: DeployQuery,
      body: { content: { 'application/json': DeployRequestSchema } },
      responses: { 201: { description: 'a new version, now active (unless activate=false)', content: { 'application/json': DeployResultSchema } }, 200: { description: 'the same bundle and spec as the active version: nothing changed', content: { 'application/json': DeployResultSchema } } },
      errors: {
        400: '`invalid_deploy` (the request, its bundle or its inputSchema), `model_not_found`, `model_unreachable`, `invalid_json`, `too_deep`, `invalid_request` (activate is not true or false)',
        404: '`tenant_not_found`',
        409: '`name_taken`: the name is held by a function deployed before names were per tenant',
        413: '`too_large`: over EMBERS_MAX_BUNDLE_BYTES',
      },
    },
    {
      method: 'get',
      path: '/',
      id: 'listFunctions',
      summary: 'List functions',
      access: 'read',
      actsForTenant: true,
      responses: { 200: { description: 'the tenant\'s functions', content: { 'application/json': z.object({ functions: z.array(FunctionSummarySchema) }) } } },
    },
    {
      method: 'get',
      path: '/:name',
      id: 'getFunction',
      summary: 'Show a function',
      description: 'Its versions, active manifest, replicas, scale, latest cold starts, and the functions it called and was called by in the last hour.',
      access: 'read',
      actsForTenant: true,
      params: FunctionParams,
      responses: { 200: { description: 'the function', content: { 'application/json': FunctionDetailSchema } } },
      errors: NAME_ERRORS,
    },
    {
      method: 'get',
      path: '/:name/tail',
      id: 'tailFunction',
      summary: 'Follow a function\'s logs live',
      description:
        'Server-Sent Events from every replica of the function, from now until the caller leaves (`embers tail`): `tailing` first, then `log` (a `ctx.log` line: `time`, `rid`, `level`, `msg`, `fields`, `version`, `replica`) and `request` (one per finished request: `rid`, `status`, `ms`, `queueMs`, `cold`, `version`, `kind` sync, async or batch; never its input or output). Lines are cut to a few KiB; lines lost to the tail\'s bounds, or to a reader slower than the function, are counted in `dropped` events (`count`). Replicas write the tail only while someone reads it.',
      access: 'read',
      actsForTenant: true,
      params: FunctionParams,
      query: TailQuery,
      responses: { 200: { description: 'the events', content: { 'text/event-stream': { jsonSchema: { type: 'string', description: 'Server-Sent Events' } } } } },
      errors: { 400: '`invalid_request`: a filter is malformed', ...NAME_ERRORS, 503: '`too_many_tails`: this gateway serves as many tails as it can' },
    },
    {
      method: 'delete',
      path: '/:name',
      id: 'deleteFunction',
      summary: 'Delete a function',
      description: 'Stops serving it; its versions stay in S3. Refused while requests are queued or running, unless forced.',
      access: 'deploy',
      actsForTenant: true,
      params: FunctionParams,
      query: DeleteQuery,
      responses: { 200: { description: 'deleted', content: { 'application/json': DeletedSchema } } },
      errors: {
        400: '`invalid_request`: force is not true or false',
        ...NAME_ERRORS,
        409: '`function_busy` (requests queued or running: wait, or force) or `function_redeployed`',
      },
    },
  ],
};
