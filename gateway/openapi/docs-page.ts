// GET /docs: the interactive API reference, Swagger UI from the swagger-ui-dist package on the
// gateway's own /v1/openapi.json. Every file comes from this gateway (nothing from a CDN, so it
// works offline), read once, and the Content-Security-Policy lets the page load nothing else.
import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Hono } from 'hono';
import type { GatewayEnv } from '../deps.ts';
import { ApiError } from '../errors.ts';
import type { RouteGroup } from './operation.ts';

const require = createRequire(import.meta.url);
const SWAGGER_UI = path.dirname(require.resolve('swagger-ui-dist/package.json'));
const OWN = fileURLToPath(new URL('./docs-ui/', import.meta.url));
const PAGE = path.join(OWN, 'index.html');

/** What the page may load, by the name it is served under. */
const ASSETS: Record<string, { file: string; type: string }> = {
  'swagger-ui.css': { file: path.join(SWAGGER_UI, 'swagger-ui.css'), type: 'text/css; charset=utf-8' },
  'swagger-ui-bundle.js': { file: path.join(SWAGGER_UI, 'swagger-ui-bundle.js'), type: 'text/javascript; charset=utf-8' },
  'favicon-32x32.png': { file: path.join(SWAGGER_UI, 'favicon-32x32.png'), type: 'image/png' },
  'docs.css': { file: path.join(OWN, 'docs.css'), type: 'text/css; charset=utf-8' },
  'init.js': { file: path.join(OWN, 'init.js'), type: 'text/javascript; charset=utf-8' },
};

/**
 * Scripts and styles from this origin only (no inline script; Swagger UI sets style attributes,
 * and its icons are data: URIs); "Try it out" calls this origin, or EMBERS_PUBLIC_URL's when the
 * document's server is another.
 */
export function contentSecurityPolicy(publicUrl: string): string {
  let api = '';
  try {
    api = ` ${new URL(publicUrl).origin}`;
  } catch {
    // No public URL yet: this origin only.
  }
  return [
    "default-src 'none'",
    "script-src 'self'",
    "style-src 'self' 'unsafe-inline'",
    "img-src 'self' data:",
    "font-src 'self'",
    `connect-src 'self'${api}`,
    "base-uri 'none'",
    "form-action 'none'",
    "frame-ancestors 'none'",
  ].join('; ');
}

/** The page at /docs (mounted at the root: /docs/ sends a browser there), its files under /docs/. */
export function docsRoutes(o: { publicUrl: () => string }) {
  const app = new Hono<GatewayEnv>();
  const loaded = new Map<string, Promise<Buffer>>();
  const load = (file: string) => {
    let bytes = loaded.get(file);
    if (!bytes) {
      bytes = readFile(file);
      // A failed read is tried again by the next request.
      bytes.catch(() => loaded.delete(file));
      loaded.set(file, bytes);
    }
    return bytes;
  };
  const headers = (type: string) => ({
    'content-type': type,
    'content-security-policy': contentSecurityPolicy(o.publicUrl()),
    'x-content-type-options': 'nosniff',
    'referrer-policy': 'no-referrer',
    'cache-control': 'public, max-age=3600',
  });

  // (A Buffer sits on an ArrayBuffer; Hono's type wants that said.)
  app.get('/docs', async (c) => c.body((await load(PAGE)) as Uint8Array<ArrayBuffer>, 200, headers('text/html; charset=utf-8')));
  app.get('/docs/', (c) => c.redirect('/docs', 301));

  app.get('/docs/:asset', async (c) => {
    const name = c.req.param('asset');
    const asset = Object.hasOwn(ASSETS, name) ? ASSETS[name] : undefined;
    if (!asset) throw new ApiError(404, 'not_found', `no file /docs/${name.slice(0, 100)}; the reference page is /docs`);
    return c.body((await load(asset.file)) as Uint8Array<ArrayBuffer>, 200, headers(asset.type));
  });
  return app;
}

export const docsOperations: RouteGroup = {
  tag: 'reference',
  description: 'This document, and the page that shows it.',
  operations: [
    {
      method: 'get',
      path: '/docs',
      id: 'getDocsPage',
      summary: 'The interactive API reference',
      description: 'Swagger UI on `/v1/openapi.json`, served from this gateway (it works offline). "Authorize" takes a key: the page then lists that tenant\'s functions and sends the key with "Try it out".',
      access: 'public',
      responses: { 200: { description: 'an HTML page', content: { 'text/html': { jsonSchema: { type: 'string' } } } } },
    },
  ],
};
