// Deploy and manage functions: POST/GET /v1/functions, GET/DELETE /v1/functions/:name.
import { Hono, type Context } from 'hono';
import { limitBody } from '../middleware/body-limit.ts';
import { z } from 'zod';
import { DeployRequestSchema, errorBody, FUNCTION_NAME, type Manifest } from '../../core/contracts.ts';
import { takeUnstarted } from '../../core/live-queue.ts';
import { answerUnrun } from '../../core/jobs.ts';
import { DEFAULT_TENANT, plainName, qualifiedName } from '../../core/names.ts';
import { ApiError, functionNotFound } from '../errors.ts';
import { readJson } from '../request-body.ts';
import { headOwned } from '../owned-objects.ts';
import { compileInputSchema, schemaTooLarge } from '../../core/validate.ts';
import { actingTenant, requireScope } from '../middleware/auth.ts';
import { replicasOf } from '../replicas.ts';
import { BARE_MODEL_BUNDLE, bareModelSpec } from '../bare-model.ts';
import type { GatewayDeps, GatewayEnv } from '../deps.ts';
import { keys, liveStream } from '../../core/keys.ts';

export function functionRoutes(deps: GatewayDeps) {
  const app = new Hono<GatewayEnv>();
  const { registry, redis } = deps;

  app.post(
    '/',
    limitBody(deps.maxBundleBytes, `deploy body is over ${deps.maxBundleBytes} bytes (EMBERS_MAX_BUNDLE_BYTES)`),
    async (c) => {
      requireScope(c, 'deploy');
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
      const manifest = await registry.deploy({ ...spec, name: key }, bundle);
      deps.functions.invalidate(key);
      const origin = deps.publicUrl;
      const unchanged = manifest.unchanged === true;
      return c.json({ ...describeVersion(manifest), tenant, unchanged, endpoint: `${origin}/v1/run/${spec.name}` }, unchanged ? 200 : 201);
    },
  );

  app.get('/', async (c) => {
    requireScope(c, 'read');
    const tenant = actingTenant(c);
    return c.json({ functions: (await registry.list()).filter((f) => f.tenant === tenant).map((f) => ({ ...f, name: plainName(f.name) })) });
  });

  app.get('/:name', async (c) => {
    requireScope(c, 'read');
    const { name, key, tenant } = await visible(c);
    const versions = await registry.versions(key);
    const active = await registry.active(key);
    if (!active) throw functionNotFound(name);
    return c.json({
      name,
      tenant,
      active: active.version,
      endpoint: `${deps.publicUrl}/v1/run/${name}`,
      manifest: describeVersion(active),
      versions: versions.map((v) => ({ version: v.version, createdAt: v.createdAt, bundleBytes: v.bundle.bytes })),
      replicas: await replicasOf(redis, key),
      scale: await redis.hget(keys.desired, key).then((r) => (r ? JSON.parse(r) : null)),
      coldStarts: (await redis.lrange(keys.coldStarts(key), 0, 19)).map((r) => JSON.parse(r)),
    });
  });

  app.delete('/:name', async (c) => {
    requireScope(c, 'deploy');
    const { name, key } = await visible(c);
    const force = c.req.query('force');
    if (force !== undefined && force !== 'true' && force !== 'false') throw new ApiError(400, 'invalid_request', `force must be true or false, got "${force}"`);
    // Requests still queued would never be answered once the function is gone: refused unless forced.
    let dropped = 0;
    const answer = async () => {
      try {
        dropped = await answerUnstarted(deps, key);
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
    return c.json({ deleted: name, ...(force === 'true' ? { dropped } : {}) });
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

function checkName(name: string): string {
  if (!FUNCTION_NAME.test(name)) throw functionNotFound(name, 'malformed');
  return name;
}

function describeVersion(m: Manifest) {
  return {
    name: plainName(m.name),
    version: m.version,
    createdAt: m.createdAt,
    models: m.models,
    batching: m.batching,
    scaling: m.scaling,
    timeoutMs: m.timeoutMs,
    inputSchema: m.inputSchema,
    ...(m.binaryInput ? { binaryInput: m.binaryInput } : {}),
    ...(m.kind ? { kind: m.kind } : {}),
    ...(m.tensors ? { tensors: m.tensors } : {}),
    bundle: m.bundle,
  };
}
