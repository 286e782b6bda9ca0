// /v1/functions/:name/secrets — a function's secrets (core/secrets.ts): put one (the request body
// is the value), list their names, delete one. A change rolls the function's replicas onto a new
// version (Registry.roll), since each reads its secrets as it starts. No answer, error or log line
// ever holds a value; a function of another tenant is as unknown as a missing one.
import { Hono, type Context } from 'hono';
import { z } from 'zod';
import { FunctionName } from '../../core/contracts.ts';
import { ENV_NAME, ENV_NAME_RULE, MAX_SECRET_BYTES, MAX_SECRETS_PER_FUNCTION, secretValueProblem } from '../../core/function-env.ts';
import { ApiError, functionNotFound } from '../errors.ts';
import { limitBody } from '../middleware/body-limit.ts';
import { actingTenant, requireScope } from '../middleware/auth.ts';
import { readBytes } from '../request-body.ts';
import type { GatewayDeps, GatewayEnv } from '../deps.ts';
import type { RouteGroup } from '../openapi/operation.ts';

const SecretName = z.string().regex(ENV_NAME, ENV_NAME_RULE);
const FunctionParams = z.object({ name: FunctionName });
const SecretParams = z.object({ name: FunctionName, secret: SecretName });

const SecretSchema = z
  .object({ object: z.literal('secret'), name: z.string(), createdAt: z.iso.datetime(), updatedAt: z.iso.datetime() })
  .meta({ id: 'Secret' });

const SecretPutSchema = z.object({
  ...SecretSchema.shape,
  function: FunctionName,
  version: z.string().describe('the version its replicas now roll onto: they read the secret as they start'),
});

const SecretDeletedSchema = z.object({ object: z.literal('secret'), name: z.string(), function: FunctionName, deleted: z.literal(true), version: z.string() });

export function secretRoutes(deps: GatewayDeps) {
  const app = new Hono<GatewayEnv>();
  const { secrets, registry } = deps;

  /** The acting tenant's function :name, by its key: another tenant's is as unknown as a missing one. */
  const owned = async (c: Context<GatewayEnv>): Promise<{ name: string; key: string }> => {
    const name = c.req.param('name') ?? '';
    if (!FunctionName.safeParse(name).success) throw functionNotFound(name, 'malformed');
    const key = await registry.find(actingTenant(c), name);
    if (!key) throw functionNotFound(name);
    return { name, key };
  };
  const secretName = (c: Context<GatewayEnv>): string => {
    const name = c.req.param('secret') ?? '';
    if (!ENV_NAME.test(name)) throw new ApiError(400, 'invalid_secret_name', `"${name.slice(0, 140)}" cannot name a secret: ${ENV_NAME_RULE}`);
    return name;
  };
  /** A new version for the replicas to roll onto; none when the function went meanwhile. */
  const roll = async (name: string, key: string): Promise<string> => {
    const rolled = await registry.roll(key, 'secrets');
    if (!rolled) throw functionNotFound(name, 'deleted');
    deps.functions.invalidate(key);
    return rolled.version;
  };

  app.put('/:name/secrets/:secret', limitBody(MAX_SECRET_BYTES, `a secret holds at most ${MAX_SECRET_BYTES} bytes`), async (c) => {
    requireScope(c, 'deploy');
    const { name, key } = await owned(c);
    const secret = secretName(c);
    if (!secrets.sealer) throw new ApiError(503, 'secrets_not_configured', 'this platform has no EMBERS_SECRETS_KEY, so it cannot keep secrets; its operator sets the same one on every gateway, agent and replica');
    const value = await readBytes(c);
    const problem = secretValueProblem(value);
    if (problem) throw new ApiError(problem.code === 'too_large' ? 413 : 400, problem.code, `${secret}: ${problem.message}; send the value itself as the request body`);
    const kept = await secrets.put(key, secret, value.toString('utf8'));
    if (kept === 'no_function') throw functionNotFound(name, 'deleted');
    if (kept === 'too_many') throw new ApiError(409, 'too_many_secrets', `${name} has ${MAX_SECRETS_PER_FUNCTION} secrets, the most a function holds; delete one first (\`embers secrets delete\`)`);
    const version = await roll(name, key);
    const view = (await secrets.list(key)).find((s) => s.name === secret);
    if (!view) throw functionNotFound(name, 'deleted');
    return c.json({ ...view, function: name, version } satisfies z.output<typeof SecretPutSchema>, kept === 'added' ? 201 : 200);
  });

  app.get('/:name/secrets', async (c) => {
    requireScope(c, 'read');
    const { key } = await owned(c);
    return c.json({ object: 'list' as const, data: await secrets.list(key) } satisfies z.output<typeof SecretListSchema>);
  });

  app.delete('/:name/secrets/:secret', async (c) => {
    requireScope(c, 'deploy');
    const { name, key } = await owned(c);
    const secret = secretName(c);
    if (!(await secrets.delete(key, secret))) throw new ApiError(404, 'secret_not_found', `${name} has no secret ${secret}; \`embers secrets list ${name}\` shows its secrets`);
    const version = await roll(name, key);
    return c.json({ object: 'secret', name: secret, function: name, deleted: true, version } satisfies z.output<typeof SecretDeletedSchema>);
  });

  return app;
}

const SecretListSchema = z.object({ object: z.literal('list'), data: z.array(SecretSchema) });

const NOT_FOUND = '`function_not_found`: no function of this tenant by that name (another tenant\'s is as unknown)';

export const secretOperations: RouteGroup = {
  tag: 'secrets',
  description: 'A function\'s secrets, read by its handler as `ctx.env.NAME` (`embers secrets`). Values are sealed and never shown again.',
  operations: [
    {
      method: 'put',
      path: '/:name/secrets/:secret',
      id: 'putSecret',
      summary: 'Set a secret',
      description: `The request body is the value itself (UTF-8 text, 1 byte to ${MAX_SECRET_BYTES / 1024} KiB, taken as it is: no JSON, no trailing newline removed). Kept sealed with the platform's key; the function's replicas roll onto a new version, finishing what they hold, and read it as they start. A secret of a var's name wins over the var.`,
      access: 'deploy',
      actsForTenant: true,
      params: SecretParams,
      body: { content: { 'text/plain': { jsonSchema: { type: 'string' } }, 'application/octet-stream': { jsonSchema: { type: 'string', format: 'binary' } } } },
      responses: { 201: { description: 'added', content: { 'application/json': SecretPutSchema } }, 200: { description: 'its value replaced', content: { 'application/json': SecretPutSchema } } },
      errors: {
        400: '`invalid_secret_name`, `invalid_secret`: the value is empty or not UTF-8',
        404: NOT_FOUND,
        409: `\`too_many_secrets\`: the function has ${MAX_SECRETS_PER_FUNCTION}`,
        413: `\`too_large\`: the value is over ${MAX_SECRET_BYTES} bytes`,
        503: '`secrets_not_configured`: the platform has no EMBERS_SECRETS_KEY',
      },
    },
    {
      method: 'get',
      path: '/:name/secrets',
      id: 'listSecrets',
      summary: 'List a function\'s secrets',
      description: 'Names and dates only.',
      access: 'read',
      actsForTenant: true,
      params: FunctionParams,
      responses: { 200: { description: 'its secrets', content: { 'application/json': SecretListSchema } } },
      errors: { 404: NOT_FOUND },
    },
    {
      method: 'delete',
      path: '/:name/secrets/:secret',
      id: 'deleteSecret',
      summary: 'Delete a secret',
      description: 'Its replicas roll onto a new version without it, finishing what they hold.',
      access: 'deploy',
      actsForTenant: true,
      params: SecretParams,
      responses: { 200: { description: 'deleted', content: { 'application/json': SecretDeletedSchema } } },
      errors: { 400: '`invalid_secret_name`', 404: `${NOT_FOUND}; \`secret_not_found\`` },
    },
  ],
};
