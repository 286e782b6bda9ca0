// GET /docs: the interactive API reference, Swagger UI from the swagger-ui-dist package on the
// gateway's own /v1/openapi.json. Every file comes from this gateway (nothing from a CDN, so it
// works offline), read once, and the Content-Security-Policy lets the page load nothing else.
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { staticPage, TYPES, type StaticFile } from '../static-files.ts';
import type { RouteGroup } from './operation.ts';

const require = createRequire(import.meta.url);
const SWAGGER_UI = path.dirname(require.resolve('swagger-ui-dist/package.json'));
const OWN = fileURLToPath(new URL('./docs-ui/', import.meta.url));
const PAGE = path.join(OWN, 'index.html');

/** What the page may load, by the name it is served under. */
const ASSETS: Record<string, StaticFile> = {
  'swagger-ui.css': { file: path.join(SWAGGER_UI, 'swagger-ui.css'), type: TYPES.css },
  'swagger-ui-bundle.js': { file: path.join(SWAGGER_UI, 'swagger-ui-bundle.js'), type: TYPES.js },
  'favicon-32x32.png': { file: path.join(SWAGGER_UI, 'favicon-32x32.png'), type: TYPES.png },
  'docs.css': { file: path.join(OWN, 'docs.css'), type: TYPES.css },
  'init.js': { file: path.join(OWN, 'init.js'), type: TYPES.js },
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
  const headers = (type: string) => ({
    'content-type': type,
    'content-security-policy': contentSecurityPolicy(o.publicUrl()),
    'x-content-type-options': 'nosniff',
    'referrer-policy': 'no-referrer',
    'cache-control': 'public, max-age=3600',
  });
  return staticPage({ path: '/docs', page: PAGE, files: ASSETS, headers, what: 'the reference page' });
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
