// GET /v1/whoami — what the key a request carries may do: its tenant, scopes and whether it is the
// admin key. The console asks this instead of probing admin routes.
import { Hono } from 'hono';
import { z } from 'zod';
import type { GatewayEnv } from '../deps.ts';
import type { RouteGroup } from '../openapi/operation.ts';

const WhoamiSchema = z.object({ tenant: z.string(), keyId: z.string(), scopes: z.array(z.string()), admin: z.boolean() }).meta({ id: 'Whoami' });

export function whoamiRoutes() {
  const app = new Hono<GatewayEnv>();
  app.get('/', (c) => {
    const { tenant, keyId, scopes, admin } = c.get('auth');
    return c.json({ tenant, keyId, scopes, admin } satisfies z.output<typeof WhoamiSchema>);
  });
  return app;
}

export const whoamiOperations: RouteGroup = {
  tag: 'keys',
  description: 'The key a request carries.',
  operations: [{ method: 'get', path: '/', id: 'getWhoami', summary: 'What this key may do', access: 'key', responses: { 200: { description: 'its tenant, scopes and whether it is the admin key', content: { 'application/json': WhoamiSchema } } } }],
};
