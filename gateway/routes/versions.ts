// A function's versions and its traffic: GET /v1/functions/:name/versions, POST …/rollback,
// PUT …/traffic (a split between two versions), POST …/rollouts (an automatic rollout, driven by
// the leading scheduler: scheduler/rollouts.ts). Every change reaches every gateway at once.
import { Hono, type Context } from 'hono';
import { z } from 'zod';
import { FUNCTION_NAME, FunctionName, type Manifest } from '../../core/contracts.ts';
import type { Registry } from '../../core/registry.ts';
import { planTraffic, ROLLOUT_STEPS, sharesOf, TrafficError, type Routing, type TrafficSplit } from '../../core/traffic.ts';
import { ApiError, functionNotFound } from '../errors.ts';
import { readJson } from '../request-body.ts';
import { actingTenant, requireScope } from '../middleware/auth.ts';
import type { RouteGroup } from '../openapi/operation.ts';
import type { GatewayDeps, GatewayEnv } from '../deps.ts';

const Params = z.object({ name: FunctionName });
const Version = z.string().regex(/^v\d+$/, 'a version is "v" and its number, as `embers versions list` shows it');

export const SplitSchema = z
  .object({
    version: z.string().describe('the second version, on replicas of its own'),
    percent: z.number().int().describe('its share of requests; the active version takes the rest'),
    since: z.string(),
    auto: z.object({ step: z.number().int(), steps: z.array(z.number().int()), stepStartedAt: z.string() }).nullable().describe('an automatic rollout: its step in `steps` (shares of the new version) and when that step began'),
  })
  .meta({ id: 'TrafficSplit' });

export const RolloutSchema = z
  .object({
    version: z.string(),
    from: z.string().describe('the version it was measured against'),
    outcome: z.enum(['promoted', 'rolled_back']),
    reason: z.string(),
    at: z.string(),
  })
  .meta({ id: 'RolloutOutcome' });

const VersionsSchema = z.object({
  name: FunctionName,
  active: z.string(),
  previous: z.string().nullable().describe('the version active before this one: what `rollback` goes back to'),
  versions: z.array(z.object({ version: z.string(), createdAt: z.string(), bundleBytes: z.number().int(), active: z.boolean(), traffic: z.number().int().describe('its share of requests now, in percent') })),
  split: SplitSchema.nullable(),
  rollout: RolloutSchema.nullable().describe('how the last automatic rollout ended'),
});

const RollbackBody = z.object({ version: Version.optional().describe('unset: end the split if there is one, else the previous active version') });
const TrafficBody = z.object({ traffic: z.record(z.string(), z.number()).describe('version → whole percent, one or two versions adding up to 100: {"v3": 10, "v2": 90}') });
const RolloutBody = z.object({ version: Version.describe('the version to roll out, 10 → 50 → 100 %') });

export function versionRoutes(deps: GatewayDeps) {
  const app = new Hono<GatewayEnv>();
  const { registry } = deps;

  app.get('/:name/versions', async (c) => {
    requireScope(c, 'read');
    const { name, key } = await owned(c, registry);
    return c.json(await view(registry, name, key));
  });

  app.post('/:name/rollback', async (c) => {
    requireScope(c, 'deploy');
    const { name, key } = await owned(c, registry);
    const { version } = await body(c, RollbackBody);
    const { routing, versions } = await current(registry, name, key);
    // Rolling back a split (an automatic rollout's too) ends it; with none, back to the previous version.
    const target = version ?? (routing.split ? routing.active : routing.previous);
    if (!target) throw new ApiError(409, 'no_previous_version', `${name} has had one active version only (${routing.active}); name the version to go to: \`embers rollback ${name} <version>\``);
    if (!versions.includes(target)) throw unknownVersion(name, target, versions);
    const stopped = routing.split?.auto ? { version: routing.split.version, from: routing.active, outcome: 'rolled_back' as const, reason: 'rolled back by hand (`embers rollback`)', at: new Date().toISOString() } : undefined;
    await reroute(deps, name, key, { active: target, split: null, rollout: stopped });
    return c.json(await view(registry, name, key));
  });

  app.put('/:name/traffic', async (c) => {
    requireScope(c, 'deploy');
    const { name, key } = await owned(c, registry);
    const { traffic } = await body(c, TrafficBody);
    const { routing, versions } = await current(registry, name, key);
    const plan = asAnswer(() => planTraffic(name, traffic, routing.active, versions));
    const split: TrafficSplit | null = plan.split ? { ...plan.split, since: new Date().toISOString() } : null;
    await reroute(deps, name, key, { active: plan.active, split });
    return c.json(await view(registry, name, key));
  });

  app.post('/:name/rollouts', async (c) => {
    requireScope(c, 'deploy');
    const { name, key } = await owned(c, registry);
    const { version } = await body(c, RolloutBody);
    const { routing, versions } = await current(registry, name, key);
    if (!versions.includes(version)) throw unknownVersion(name, version, versions);
    if (version === routing.active) throw new ApiError(409, 'already_active', `${version} is already the active version of ${name}; deploy a new one (\`embers deploy --no-activate\`) and roll that out`);
    const now = Date.now();
    // At 0 % until a replica of it is ready (scheduler/rollouts.ts): its first step is not judged on its cold start.
    await reroute(deps, name, key, { split: { version, percent: 0, since: new Date(now).toISOString(), auto: { step: 0, stepStartedAt: now } } });
    return c.json(await view(registry, name, key), 201);
  });

  return app;
}

/** The acting tenant's :name function and its key: another tenant's is as unknown as a missing one. */
async function owned(c: Context<GatewayEnv>, registry: Registry): Promise<{ name: string; key: string }> {
  const name = c.req.param('name') ?? '';
  if (!FUNCTION_NAME.test(name)) throw functionNotFound(name, 'malformed');
  const key = await registry.find(actingTenant(c), name);
  if (!key) throw functionNotFound(name);
  return { name, key };
}

async function body<T extends z.ZodType>(c: Context<GatewayEnv>, schema: T): Promise<z.output<T>> {
  const text = await c.req.text();
  const parsed = schema.safeParse(text.trim() === '' ? {} : await readJson(c, 8));
  if (!parsed.success) throw new ApiError(400, 'invalid_request', z.prettifyError(parsed.error), parsed.error.issues);
  return parsed.data;
}

async function current(registry: Registry, name: string, key: string): Promise<{ routing: Routing; versions: string[] }> {
  const [routing, manifests] = await Promise.all([registry.routing(key), registry.versions(key)]);
  if (!routing) throw functionNotFound(name);
  return { routing, versions: manifests.map((m) => m.version) };
}

async function reroute(deps: GatewayDeps, name: string, key: string, to: Parameters<Registry['route']>[1]): Promise<void> {
  if ((await deps.registry.route(key, to)) === 'not_found') throw functionNotFound(name, 'deleted');
  deps.functions.invalidate(key);
}

function unknownVersion(name: string, version: string, versions: string[]): ApiError {
  return new ApiError(404, 'version_not_found', `${name} has no version "${version}"; it has ${versions.join(', ')} (\`embers versions list ${name}\`)`);
}

/** A plan the caller must change, as its answer. */
function asAnswer<T>(plan: () => T): T {
  try {
    return plan();
  } catch (err) {
    if (err instanceof TrafficError) throw new ApiError(err.status, err.code, err.message);
    throw err;
  }
}

/** The function's versions with their shares, its split and its last rollout, as the API shows them. */
async function view(registry: Registry, name: string, key: string): Promise<z.output<typeof VersionsSchema>> {
  const [routing, manifests] = await Promise.all([registry.routing(key), registry.versions(key)]);
  if (!routing) throw functionNotFound(name);
  const shares = sharesOf(routing);
  return {
    name,
    active: routing.active,
    previous: routing.previous,
    versions: manifests.map((m: Manifest) => ({ version: m.version, createdAt: m.createdAt, bundleBytes: m.bundle.bytes, active: m.version === routing.active, traffic: shares[m.version] ?? 0 })),
    ...describeTraffic(routing),
  };
}

/** The split and the last rollout as the API shows them (also in `GET /v1/functions/:name`). */
export function describeTraffic(r: Routing): { split: z.output<typeof SplitSchema> | null; rollout: z.output<typeof RolloutSchema> | null } {
  const s = r.split;
  return {
    split: s ? { version: s.version, percent: s.percent, since: s.since, auto: s.auto ? { step: s.auto.step, steps: [...ROLLOUT_STEPS], stepStartedAt: new Date(s.auto.stepStartedAt).toISOString() } : null } : null,
    rollout: r.rollout,
  };
}

const ERRORS = {
  404: '`function_not_found` (another tenant\'s is as unknown), `version_not_found`: no such version (the message lists them)',
  400: '`invalid_request`, `invalid_json`',
};

const viewResponse = (description: string) => ({ description, content: { 'application/json': VersionsSchema } });

export const versionOperations: RouteGroup = {
  tag: 'versions',
  description: 'A function\'s versions and which of them take its requests: rollback, a split between two versions, automatic rollouts (`embers versions`, `embers rollback`).',
  operations: [
    {
      method: 'get',
      path: '/:name/versions',
      id: 'listVersions',
      summary: 'List a function\'s versions',
      description: 'Every version with its share of requests, the split if any, and how the last automatic rollout ended.',
      access: 'read',
      actsForTenant: true,
      params: Params,
      responses: { 200: viewResponse('its versions') },
      errors: { 404: ERRORS[404] },
    },
    {
      method: 'post',
      path: '/:name/rollback',
      id: 'rollbackFunction',
      summary: 'Roll back',
      description: 'Makes `version` the active version at once, ending any split. Without one: ends the split if there is one (an automatic rollout too), else goes back to the previous active version.',
      access: 'deploy',
      actsForTenant: true,
      params: Params,
      body: { required: false, content: { 'application/json': RollbackBody } },
      responses: { 200: viewResponse('its versions after the rollback') },
      errors: { ...ERRORS, 409: '`no_previous_version`: only one version was ever active; name one' },
    },
    {
      method: 'put',
      path: '/:name/traffic',
      id: 'splitTraffic',
      summary: 'Split traffic between two versions',
      description: 'Each version runs on replicas of its own, with its own metrics, cold starts and usage. A request goes to a version by its bucket: the hash of its `Embers-Version-Key` header when sent (the same caller keeps its version on every gateway), else at random. One version at 100 % becomes the active version. Ends an automatic rollout.',
      access: 'deploy',
      actsForTenant: true,
      params: Params,
      body: { content: { 'application/json': TrafficBody } },
      responses: { 200: viewResponse('its versions with their new shares') },
      errors: { 400: '`split_not_100`: the shares do not add up to 100; `too_many_versions`: more than two; `invalid_traffic`: a share that is not a whole percent', 404: ERRORS[404] },
    },
    {
      method: 'post',
      path: '/:name/rollouts',
      id: 'startRollout',
      summary: 'Roll out a version automatically',
      description: 'Starts a replica of `version`, then gives it 10 % of requests, then 50 %, then makes it active, each step once it has served enough requests in the step\'s window with an error rate and p99 within bounds of the active version\'s over the same window; rolls back at once when they are not, recording why (`rollout` in the answers of this group).',
      access: 'deploy',
      actsForTenant: true,
      params: Params,
      body: { content: { 'application/json': RolloutBody } },
      responses: { 201: viewResponse('the rollout begun: the version at 0 % until a replica of it is ready') },
      errors: { ...ERRORS, 409: '`already_active`: the version is the active one' },
    },
  ],
};
