// Replica process entry: started by the node agent with the function and version to serve.
import { loadConfig } from '../core/config.ts';
import { EXIT_REPLACE_ME, keys, type Manifest } from '../core/contracts.ts';
import { createLogger } from '../core/log.ts';
import { createRedis } from '../core/redis.ts';
import { storeFromConfig } from '../core/s3.ts';
import { Replica } from './replica.ts';

const env = process.env;
const log = createLogger('replica');

function required(name: string): string {
  const v = env[name];
  if (!v) {
    log.fatal(`${name} is not set: replicas are started by the node agent (embers dev / scheduler), not by hand`);
    process.exit(2);
  }
  return v;
}

const config = loadConfig();
const fn = required('EMBERS_REPLICA_FUNCTION');
const version = required('EMBERS_REPLICA_VERSION');
const id = required('EMBERS_REPLICA_ID');
const redis = createRedis(required('EMBERS_REDIS_URL'));
const store = storeFromConfig(config);

const raw = await redis.hget(keys.versions(fn), version);
if (!raw) {
  log.fatal({ fn, version }, 'version not in the registry');
  process.exit(3);
}

const replica = new Replica({
  id,
  manifest: JSON.parse(raw) as Manifest,
  redis,
  store,
  log,
  cacheDir: required('EMBERS_CACHE_DIR'),
  providers: config.EMBERS_EXECUTION_PROVIDERS,
  threads: config.EMBERS_ORT_THREADS,
  concurrency: config.EMBERS_REPLICA_CONCURRENCY,
  heartbeatMs: config.EMBERS_HEARTBEAT_MS,
  lockMs: config.EMBERS_JOB_LOCK_MS,
  spawnedAt: Number(env.EMBERS_REPLICA_SPAWNED_AT) || undefined,
  node: env.EMBERS_NODE_ID,
  handlerGraceMs: config.EMBERS_HANDLER_GRACE_MS,
  modelCacheBytes: config.EMBERS_MODEL_CACHE_BYTES,
  onStuck: () => {
    // Other jobs it holds come back to the queue when their locks expire; the agent starts a fresh replica.
    void replica.abandon().finally(() => process.exit(EXIT_REPLACE_ME));
  },
});

let stopping = false;
async function stop(signal: string) {
  if (stopping) return;
  stopping = true;
  log.info({ signal }, 'draining');
  await replica.drain().catch((err) => log.error({ err }, 'drain failed'));
  redis.disconnect();
  store.destroy();
  process.exit(0);
}
process.on('SIGTERM', () => void stop('SIGTERM'));
process.on('SIGINT', () => void stop('SIGINT'));
// IPC channel closes when the agent dies: do not outlive it.
process.on('disconnect', () => void stop('agent gone'));

try {
  await replica.start();
  process.send?.({ type: 'ready' });
} catch {
  redis.disconnect();
  process.exit(1);
}
