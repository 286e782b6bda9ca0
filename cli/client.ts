// A small client for the gateway API, shared by every command and by `embers dev`.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { caFetch, type Fetch } from './ca-fetch.ts';
import { CliError } from './errors.ts';

export interface ClientOptions {
  url: string;
  apiKey: string;
  /** An extra CA certificate (PEM) to trust, for a gateway with a self-signed certificate. */
  ca?: string;
  /** With the admin key: the tenant whose functions the requests name (sent as ?tenant=). */
  tenant?: string;
}

/** URL and key from flags, then EMBERS_URL / EMBERS_API_KEY, then what `embers dev` keeps in .embers/. */
export function clientOptions(flags: { url?: string; key?: string; tenant?: string }): ClientOptions {
  const url = flags.url ?? process.env.EMBERS_URL ?? `http://127.0.0.1:${process.env.EMBERS_PORT ?? 8787}`;
  const apiKey = keyFrom(flags.key, 'EMBERS_API_KEY', 'api-key', 'API key', '--key');
  return { url: url.replace(/\/$/, ''), apiKey, ca: caCert(), ...(flags.tenant ? { tenant: flags.tenant } : {}) };
}

/** Like clientOptions, for the admin routes: --admin-key, then EMBERS_ADMIN_KEY, then .embers/admin-key. */
export function adminClientOptions(flags: { url?: string; adminKey?: string }): ClientOptions {
  const adminKey = keyFrom(flags.adminKey, 'EMBERS_ADMIN_KEY', 'admin-key', 'admin key', '--admin-key');
  return clientOptions({ url: flags.url, key: adminKey });
}

/** A key from its flag, then its variable, then the file `embers dev` keeps in the data dir. */
function keyFrom(flag: string | undefined, variable: string, fileName: string, what: string, option: string): string {
  const given = flag ?? process.env[variable];
  if (given) return given;
  const file = path.resolve(process.env.EMBERS_DATA_DIR ?? '.embers', fileName);
  try {
    return readFileSync(file, 'utf8').trim();
  } catch {
    throw new CliError(`no ${what}: pass ${option}, set ${variable}, or run this where \`npm start\` keeps ${file}`, 2);
  }
}

/** The PEM file named by EMBERS_CA_CERT, if set. */
export function caCert(file = process.env.EMBERS_CA_CERT): string | undefined {
  if (!file) return undefined;
  try {
    return readFileSync(file, 'utf8');
  } catch (err) {
    throw new CliError(`EMBERS_CA_CERT: cannot read ${file}: ${(err as Error).message}`, 2);
  }
}

export class EmbersClient {
  private readonly fetch: Fetch;

  constructor(readonly o: ClientOptions) {
    this.fetch = o.ca ? caFetch(o.ca) : (url, init) => fetch(url, init);
  }

  async request<T = unknown>(method: string, route: string, body?: BodyInit | object, headers: Record<string, string> = {}): Promise<{ status: number; data: T; headers: Headers }> {
    const res = await this.send(method, route, body, headers);
    const text = method === 'HEAD' ? '' : await res.text();
    return { status: res.status, data: (text ? jsonOrText(text) : null) as T, headers: res.headers };
  }

  /** The gateway's answer as it came (its body unread): for answers that may be bytes, or read as a stream (batch files). */
  async send(method: string, route: string, body?: BodyInit | object, headers: Record<string, string> = {}): Promise<Response> {
    const isRaw = body instanceof Uint8Array || typeof body === 'string' || (body !== undefined && typeof (body as ReadableStream).getReader === 'function');
    let res: Response;
    const target = this.o.tenant ? `${route}${route.includes('?') ? '&' : '?'}tenant=${encodeURIComponent(this.o.tenant)}` : route;
    try {
      res = await this.fetch(`${this.o.url}${target}`, {
        method,
        headers: { authorization: `Bearer ${this.o.apiKey}`, ...(body !== undefined && !isRaw ? { 'content-type': 'application/json' } : {}), ...headers },
        body: body === undefined ? undefined : isRaw ? (body as BodyInit) : JSON.stringify(body),
        ...(isRaw && typeof (body as ReadableStream).getReader === 'function' ? { duplex: 'half' } : {}),
      } as RequestInit);
    } catch (err) {
      const e = err as { cause?: { code?: string }; code?: string; message: string };
      const cause = e.cause?.code ?? e.code ?? e.message;
      if (/CERT|SELF_SIGNED|UNABLE_TO_VERIFY|ERR_TLS/.test(cause)) {
        throw new CliError(`cannot trust the TLS certificate of ${this.o.url} (${cause}): set EMBERS_CA_CERT to the PEM file of its CA (for a self-signed gateway, its certificate)`);
      }
      throw new CliError(`cannot reach Embers at ${this.o.url} (${cause}); is \`npm start\` running? (--url or EMBERS_URL to point elsewhere)`);
    }
    return res;
  }

  /** Like request, but a non-2xx answer becomes a CliError carrying the server's message. */
  async call<T = unknown>(method: string, route: string, body?: BodyInit | object, headers?: Record<string, string>): Promise<T> {
    const res = await this.request<T>(method, route, body, headers);
    if (res.status >= 400) throw new CliError(`${method} ${route} → ${res.status}: ${errorMessage(res.data)}`);
    return res.data;
  }
}

/** An answer's text parsed as JSON, or the text itself when it is not JSON. */
export function jsonOrText(text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return text;
  }
}

export function errorMessage(data: unknown): string {
  const e = (data as { error?: { message?: string } })?.error;
  return e?.message ?? (typeof data === 'string' ? data : JSON.stringify(data));
}
