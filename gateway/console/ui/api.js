// The gateway's API, called with the key signed in with. The key lives in sessionStorage: this
// tab's session only, gone when it closes, never in a cookie or the URL.
const KEY = 'embers.key';
const TENANT = 'embers.tenant';

export const session = {
  get key() {
    return sessionStorage.getItem(KEY);
  },
  /** The tenant the admin key looks at ('' for the default tenant); a tenant key sees its own. */
  get tenant() {
    return sessionStorage.getItem(TENANT) ?? '';
  },
  set tenant(t) {
    sessionStorage.setItem(TENANT, t);
  },
  admin: false,
  signIn(key) {
    sessionStorage.setItem(KEY, key);
  },
  signOut() {
    sessionStorage.removeItem(KEY);
    sessionStorage.removeItem(TENANT);
    session.admin = false;
  },
};

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

/** Calls `path` (with `query`), sending `body` as JSON; answers { data, res } or throws ApiError. */
export async function api(path, { method = 'GET', body, query = {} } = {}) {
  const url = new URL(path, location.origin);
  for (const [k, v] of Object.entries(query)) if (v !== undefined && v !== '') url.searchParams.set(k, String(v));
  if (session.admin && session.tenant && !url.searchParams.has('tenant')) url.searchParams.set('tenant', session.tenant);
  const headers = { authorization: `Bearer ${session.key}` };
  if (body !== undefined) headers['content-type'] = 'application/json';
  const res = await fetch(url, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await res.text();
  let data = text;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    // Not JSON: keep the text.
  }
  if (!res.ok) throw new ApiError(res.status, data?.error?.code ?? 'error', data?.error?.message ?? data?.error ?? `HTTP ${res.status}`);
  return { data, res };
}
