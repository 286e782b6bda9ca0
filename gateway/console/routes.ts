// GET /console: the web console, a page of this gateway's own files and uPlot from node_modules
// (nothing from a CDN: it works offline). It reads the same API a key can call, with the key the
// person signs in with, so a tenant sees only what its key may read.
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { staticPage, TYPES, type StaticFile } from '../static-files.ts';
import type { RouteGroup } from '../openapi/operation.ts';

const require = createRequire(import.meta.url);
const UPLOT = path.join(path.dirname(require.resolve('uplot/package.json')), 'dist');
const UI = fileURLToPath(new URL('./ui/', import.meta.url));

const own = (name: string, type: string): StaticFile => ({ file: path.join(UI, name), type });

/** The files the page loads, by the name each is served under (/console/<name>). */
export const CONSOLE_FILES: Record<string, StaticFile> = {
  'uPlot.iife.min.js': { file: path.join(UPLOT, 'uPlot.iife.min.js'), type: TYPES.js },
  'uPlot.min.css': { file: path.join(UPLOT, 'uPlot.min.css'), type: TYPES.css },
  'console.css': own('console.css', TYPES.css),
  'app.js': own('app.js', TYPES.js),
  'api.js': own('api.js', TYPES.js),
  'charts.js': own('charts.js', TYPES.js),
  'view.js': own('view.js', TYPES.js),
  'functions.js': own('functions.js', TYPES.js),
  'function.js': own('function.js', TYPES.js),
  'work.js': own('work.js', TYPES.js),
  'usage.js': own('usage.js', TYPES.js),
};

/**
 * Scripts and styles from this origin only, calls to this origin only; uPlot sizes its canvas
 * with style attributes.
 */
const CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self' 'unsafe-inline'",
  "img-src 'self' data:",
  "connect-src 'self'",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join('; ');

export function consoleRoutes() {
  const headers = (type: string) => ({
    'content-type': type,
    'content-security-policy': CSP,
    'x-content-type-options': 'nosniff',
    'referrer-policy': 'no-referrer',
    'cache-control': 'no-cache',
  });
  return staticPage({ path: '/console', page: path.join(UI, 'index.html'), files: CONSOLE_FILES, headers, what: 'the console' });
}

export const consoleOperations: RouteGroup = {
  tag: 'console',
  description: 'The web console.',
  operations: [
    {
      method: 'get',
      path: '/console',
      id: 'getConsole',
      summary: 'The web console',
      description: 'Functions, their replicas, latency, queue depth and cold starts over the last hour, jobs, batches and usage, for the key one signs in with (kept for the browser session only). It reads the same API: `/v1/series`, `/v1/functions`, `/v1/jobs`, `/v1/batches`, `/v1/usage`.',
      access: 'public',
      responses: { 200: { description: 'an HTML page', content: { 'text/html': { jsonSchema: { type: 'string' } } } } },
    },
  ],
};
