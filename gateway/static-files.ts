// Pages the gateway serves from files (/docs, /console): each file read once, served with the
// page's headers; only the names listed are served.
import { readFile } from 'node:fs/promises';
import { Hono } from 'hono';
import type { GatewayEnv } from './deps.ts';
import { ApiError } from './errors.ts';

export interface StaticFile {
  file: string;
  type: string;
}

export const TYPES = {
  html: 'text/html; charset=utf-8',
  css: 'text/css; charset=utf-8',
  js: 'text/javascript; charset=utf-8',
  png: 'image/png',
};

/** `path` answers the page, `path`/ redirects to it, and `path`/<name> the files by name. */
export function staticPage(o: { path: string; page: string; files: Record<string, StaticFile>; headers: (type: string) => Record<string, string>; what: string }) {
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
  // (A Buffer sits on an ArrayBuffer; Hono's type wants that said.)
  app.get(o.path, async (c) => c.body((await load(o.page)) as Uint8Array<ArrayBuffer>, 200, o.headers(TYPES.html)));
  app.get(`${o.path}/`, (c) => c.redirect(o.path, 301));
  app.get(`${o.path}/:file`, async (c) => {
    const name = c.req.param('file');
    const file = Object.hasOwn(o.files, name) ? o.files[name] : undefined;
    if (!file) throw new ApiError(404, 'not_found', `no file ${o.path}/${name.slice(0, 100)}; ${o.what} is ${o.path}`);
    return c.body((await load(file.file)) as Uint8Array<ArrayBuffer>, 200, o.headers(file.type));
  });
  return app;
}
