// Offline checks of Kubernetes objects against their schemas: kubernetes-models (and its
// prometheus-operator package for ServiceMonitors), plus what those validators let through: a
// field the schema does not know, i.e. a typo the API server would refuse or drop.
import { readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';

/** Model packages by API group; everything else is in kubernetes-models. */
const PACKAGES: Record<string, string> = { 'monitoring.coreos.com': '@kubernetes-models/prometheus-operator' };

interface SchemaError {
  instancePath: string;
  keyword: string;
  params: unknown;
}
type SchemaValidate = ((data: unknown) => boolean) & { errors?: SchemaError[] | null };
type ModelClass = new (data: unknown) => { validate(): void };

export interface K8sObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; labels?: Record<string, string> };
  [field: string]: unknown;
}

/** Problems with `obj`, as `kind/name: path what`; empty when it is valid. */
export async function schemaProblems(obj: K8sObject): Promise<string[]> {
  const where = `${obj.kind}/${obj.metadata?.name}`;
  // kustomize wraps long base64 values over lines; the API server's decoder (Go's) skips the
  // newlines, the validator's pattern does not.
  if (obj.kind === 'Secret' && obj.data) obj = { ...obj, data: Object.fromEntries(Object.entries(obj.data).map(([k, v]) => [k, String(v).replace(/\n/g, '')])) };
  const group = obj.apiVersion.includes('/') ? obj.apiVersion.split('/')[0] : '';
  const modelUrl = import.meta.resolve(`${PACKAGES[group] ?? 'kubernetes-models'}/${obj.apiVersion}/${obj.kind}`);
  const Model = ((await import(modelUrl)) as Record<string, ModelClass>)[obj.kind];
  if (!Model) return [`${where}: no model for ${obj.apiVersion} ${obj.kind}`];
  try {
    new Model(obj).validate();
  } catch (err) {
    return [`${where}: ${(err as Error).message}`];
  }
  const validate = await schemaOf(modelUrl);
  const { proxy, seen } = recording(obj);
  if (!validate(proxy)) return (validate.errors ?? []).map((e) => `${where}: ${e.instancePath} ${e.keyword} ${JSON.stringify(e.params)}`);
  return unknownFields(obj, seen).map((p) => `${where}: ${p} is not a field the schema knows`);
}

/** The generated schema validator a model file imports (the model itself keeps it private). */
async function schemaOf(modelUrl: string): Promise<SchemaValidate> {
  const source = await readFile(fileURLToPath(modelUrl), 'utf8');
  const m = /from\s*["']([^"']*_schemas\/[A-Za-z0-9]+\.js)["']/.exec(source);
  if (!m) throw new Error(`no schema import in ${modelUrl}`);
  return ((await import(new URL(m[1], modelUrl).href)) as { validate: SchemaValidate }).validate;
}

interface Reads {
  keys: Set<PropertyKey>;
  /** Enumerated: a map (labels, data), whose keys the schema cannot name. */
  listed: boolean;
}

/** A view of `root` that records which fields of each object the validator looks at. */
function recording(root: object): { proxy: object; seen: WeakMap<object, Reads> } {
  const seen = new WeakMap<object, Reads>();
  const proxies = new WeakMap<object, object>();
  const wrap = (value: unknown): unknown => {
    if (value === null || typeof value !== 'object') return value;
    let p = proxies.get(value);
    if (!p) {
      const reads: Reads = { keys: new Set(), listed: false };
      seen.set(value, reads);
      p = new Proxy(value, {
        get: (t, k) => (reads.keys.add(k), wrap(Reflect.get(t, k))),
        has: (t, k) => (reads.keys.add(k), Reflect.has(t, k)),
        ownKeys: (t) => ((reads.listed = true), Reflect.ownKeys(t)),
      });
      proxies.set(value, p);
    }
    return p;
  };
  return { proxy: wrap(root) as object, seen };
}

/** Fields of objects the validator reached but never looked at. */
function unknownFields(value: unknown, seen: WeakMap<object, Reads>, path = ''): string[] {
  if (value === null || typeof value !== 'object') return [];
  const reads = seen.get(value);
  // Never reached: under a field the schema leaves free-form.
  if (!reads) return [];
  if (Array.isArray(value)) return value.flatMap((v, i) => unknownFields(v, seen, `${path}/${i}`));
  return Object.entries(value).flatMap(([k, v]) => (reads.listed || reads.keys.has(k) ? unknownFields(v, seen, `${path}/${k}`) : [`${path}/${k}`]));
}
