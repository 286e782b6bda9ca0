// fetch over node:https that also trusts one extra CA (EMBERS_CA_CERT), for gateways with a
// self-signed or private-CA certificate. Node's own fetch takes a CA only through an undici
// Agent, and the undici package is not a dependency; NODE_EXTRA_CA_CERTS works too, but only
// when set before the process starts.
import { request as httpsRequest, Agent } from 'node:https';
import { Readable } from 'node:stream';
import type { ReadableStream as WebReadableStream } from 'node:stream/web';
import { rootCertificates } from 'node:tls';

/** Statuses whose responses have no body, which `new Response` refuses one for. */
const NULL_BODY = new Set([101, 204, 205, 304]);

export type Fetch = (url: string, init: RequestInit) => Promise<Response>;

/** A fetch that trusts `caPem` as well as the usual roots on https:// URLs; plain fetch for http://. */
export function caFetch(caPem: string): Fetch {
  const agent = new Agent({ keepAlive: true, ca: [...rootCertificates, caPem] });
  return (url, init) =>
    new Promise<Response>((resolve, reject) => {
      const u = new URL(url);
      if (u.protocol !== 'https:') return resolve(fetch(url, init));
      const headers = Object.fromEntries(new Headers(init.headers).entries());
      const req = httpsRequest(u, { method: init.method ?? 'GET', headers, agent }, (res) => {
        const h = new Headers();
        for (const [k, v] of Object.entries(res.headers)) if (v !== undefined) for (const one of [v].flat()) h.append(k, one);
        const status = res.statusCode ?? 0;
        const body = NULL_BODY.has(status) ? null : (Readable.toWeb(res) as ReadableStream<Uint8Array>);
        if (!body) res.resume();
        resolve(new Response(body, { status, statusText: res.statusMessage, headers: h }));
      });
      req.on('error', reject);
      const body = init.body;
      if (body === undefined || body === null) req.end();
      else if (typeof body === 'string' || body instanceof Uint8Array) req.end(body);
      else if (typeof (body as ReadableStream).getReader === 'function') Readable.fromWeb(body as WebReadableStream).on('error', (err) => req.destroy(err)).pipe(req);
      else reject(new Error('unsupported request body type'));
    });
}
