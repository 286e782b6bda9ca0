// A replica's cold start after its process started: the function's secrets opened, the bundle from the node's cache (or S3),
// the models through the node's model cache, then the user-code process imports the bundle,
// loads the models, runs the handler's setup and warms up. Timed phase by phase.
import { rename, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { linkPlatformModules } from '../../core/bundle-dir.ts';
import type { ColdStartPhases, Manifest } from '../../core/contracts.ts';
import { plainName } from '../../core/names.ts';
import { mergeEnv } from '../../core/function-env.ts';
import type { ObjectStore } from '../../core/s3.ts';
import type { ExecutionProvider } from '../../native/session.ts';
import { ModelCache } from './model-cache.ts';
import type { UserCodeProcess } from './user-code-process.ts';

export interface LoadOptions {
  id: string;
  manifest: Manifest;
  /** The platform's bucket: the bundle, and models there. */
  store: ObjectStore;
  /** The function's tenant. */
  tenant: string;
  /** The store that reads one of the function's models: the platform's, or its tenant's registered bucket; null: neither. */
  modelStore: (uri: string) => Promise<ObjectStore | null>;
  /** The function's secrets, opened (core/secrets.ts): read at each start, so a replica started after a change has it. */
  secrets: () => Promise<Record<string, string>>;
  cacheDir: string;
  /** Bound of the node's model cache (LRU beyond it). */
  modelCacheBytes?: number;
  providers: ExecutionProvider[];
  threads: number;
  /** On CPU, sessions per model that may run at once. @default 1 */
  instances?: number;
  /** On CPU, intra-op threads of an inference that has the replica to itself (0: no such session). */
  wideThreads?: number;
  /** How long after the last live request batch lines may use the models again. */
  batchYieldMs: number;
  /** How long a handler may run past its timeout before the replica gives up on it. */
  handlerGraceMs: number;
  /** Largest answer (bytes) a handler may give (EMBERS_MAX_ANSWER_BYTES). */
  maxAnswerBytes: number;
  /** The user-code process, booted, waiting for its assignment. */
  userCode: UserCodeProcess;
  /** The GPU the user code's models run on (CUDA_VISIBLE_DEVICES), on GPU nodes. */
  cudaVisibleDevices?: string;
}

/** Loads the function; `at.phase` says which phase a failure happened in. */
export async function loadFunction(o: LoadOptions, at: { phase: string }): Promise<Omit<ColdStartPhases, 'spawnMs' | 'totalMs'>> {
  const { manifest } = o;
  // Kept in this function and sent over IPC only: never logged, recorded or put in an environment.
  at.phase = 'secrets';
  const env = mergeEnv(manifest.vars, await o.secrets());
  at.phase = 'bundle';
  const tBundle = performance.now();
  const bundleFile = await fetchBundle(o);
  const fetchBundleMs = performance.now() - tBundle;

  at.phase = 'model_fetch';
  const tFetch = performance.now();
  const cache = new ModelCache(path.join(o.cacheDir, 'models'), o.store, o.modelCacheBytes);
  const files = await Promise.all(
    Object.entries(manifest.models).map(async ([name, uri]) => {
      const from = await o.modelStore(uri);
      if (!from) throw new Error(`model ${name} (${uri}) cannot be read: its bucket is not registered by the function's tenant`);
      return [name, await cache.fetch(uri, from, o.tenant)] as const;
    }),
  );
  const modelFetchMs = files.every(([, f]) => f.hit) ? 0 : performance.now() - tFetch;

  // bundle (its import), model_load, setup and warmup run in the user-code process.
  at.phase = 'model_load';
  const { bundleMs, modelLoadMs, setupMs, warmupMs } = await o.userCode.assign(
    {
      replica: o.id,
      env: o.cudaVisibleDevices !== undefined ? { CUDA_VISIBLE_DEVICES: o.cudaVisibleDevices } : {},
      // The tenant's own name for it, not the platform's key (core/names.ts).
      fn: { name: plainName(manifest.name), version: manifest.version, timeoutMs: manifest.timeoutMs, batching: manifest.batching, kind: manifest.kind, tensors: manifest.tensors, env },
      settings: {
        providers: o.providers,
        threads: o.threads,
        instances: o.instances ?? 1,
        wideThreads: o.wideThreads ?? 0,
        batchYieldMs: o.batchYieldMs,
        handlerGraceMs: o.handlerGraceMs,
        maxAnswerBytes: o.maxAnswerBytes,
      },
    },
    bundleFile,
    Object.fromEntries(files.map(([name, f]) => [name, { path: f.path, bytes: f.bytes }])),
  );
  return { bundleMs: fetchBundleMs + bundleMs, modelFetchMs, modelLoadMs, setupMs, warmupMs };
}

/** The bundle as a file in the node's cache (fetched from S3 once per content hash). */
async function fetchBundle(o: LoadOptions): Promise<string> {
  const { bundle } = o.manifest;
  const file = path.join(o.cacheDir, 'bundles', `${bundle.sha256}.mjs`);
  if (!(await stat(file).catch(() => null))) {
    await linkPlatformModules(path.dirname(file));
    const tmp = `${file}.${process.pid}.tmp.mjs`;
    await writeFile(tmp, await o.store.get(bundle.key));
    await rename(tmp, file);
  }
  return file;
}
