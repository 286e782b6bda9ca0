// GET /v1/openapi.json. Without a key it answers the routes alone: their shape is no secret, and
// a reference page or a client generator can read it before anyone has a key. With a key it
// adds the deployed functions of the key's tenant (the admin key: of `?tenant=`, else the
// default tenant's), each with its input schema: never another tenant's. A key that is sent is
// checked as on any /v1 route: a wrong one is 401, not the routes alone.
import { Hono } from 'hono';
import type { GatewayDeps, GatewayEnv } from '../deps.ts';
import { actingTenant, authenticate } from '../middleware/auth.ts';
import type { AuthContext } from '../../core/tenants.ts';
import type { OpenApiDocuments } from './documents.ts';
import type { RouteGroup } from './operation.ts';

export function openApiRoutes(deps: Pick<GatewayDeps, 'tenants' | 'adminKey'>, documents: OpenApiDocuments) {
  const app = new Hono<GatewayEnv>();
  const auth = authenticate(deps.tenants, deps.adminKey);
  app.get(
    '/',
    (c, next) => (c.req.header('authorization') === undefined ? next() : auth(c, next)),
    async (c) => {
      const caller = c.var.auth as AuthContext | undefined;
      const json = caller ? await documents.forTenant(actingTenant(c)) : documents.staticJson();
      // What it lists depends on the key: a cache keeps one answer per Authorization.
      return c.body(json, 200, { 'content-type': 'application/json; charset=utf-8', 'cache-control': 'private, no-cache', vary: 'authorization' });
    },
  );
  return app;
}

export const openApiOperations: RouteGroup = {
  tag: 'reference',
  description: 'This document, and the page that shows it.',
  operations: [
    {
      method: 'get',
      path: '/',
      id: 'getOpenApiDocument',
      summary: 'This OpenAPI document',
      description: 'Generated from the zod schemas the routes check with. Without a key: the routes alone. With a key: also the key\'s tenant\'s deployed functions, each under `POST /v1/run/<name>` with its input schema (the admin key: `?tenant=`\'s, else the default tenant\'s).',
      access: 'optional',
      actsForTenant: true,
      responses: { 200: { description: 'OpenAPI 3.1', content: { 'application/json': { jsonSchema: { type: 'object', description: 'an OpenAPI 3.1 document' } } } } },
      errors: { 401: 'a key was sent, and it is malformed, unknown or revoked' },
    },
  ],
};
