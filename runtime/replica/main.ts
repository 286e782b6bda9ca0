// Replica process entry (trusted: it holds Redis and S3). The node agent keeps one of these
// booted in standby (Redis connected, its user-code process booted in its sandbox) and assigns
// it a function version over IPC when a replica is needed, so a cold start does not pay for
// process and module start-up. Started without EMBERS_REPLICA_STANDBY, it reads its assignment
// from the environment instead.
import { readdir } from 'node:fs/promises';
import { LiveQueue } from '../../core/live-queue.ts';
import { Registry } from '../../core/registry.ts';
import { FunctionsCache } from '../../gateway/functions-cache.ts';
import { loadConfig, ortInstances, redisTarget } from '../../core/config.ts';
import { EXIT_BROKE_CHANNEL, EXIT_REPLACE_ME, type Manifest } from '../../core/contracts.ts';
import { createLogger } from '../../core/log.ts';
import { createRedis } from '../../core/redis.ts';
import { BucketRegistry, TenantStores } from '../../core/buckets.ts';
import { storeFromConfig } from '../../core/s3.ts';
import { Sealer } from '../../core/sealed.ts';
import { FunctionSecrets } from '../../core/secrets.ts';
import { Replica } from './replica.ts';
import { probeSandbox, type SandboxSupport } from './sandbox.ts';
import { USER_CODE_V8_FLAGS, UserCodeProcess } from './user-code-process.ts';
import { baseKey, DEFAULT_TENANT } from '../../core/names.ts';
import { keys } from '../../core/keys.ts';
import type { Assignment, ToAgent } from './agent-messages.ts';

const env = process.env;
const log = createLogger('replica');

function required(name: string): string {
  const v = env[name];
  if (!v) {
    log.fatal(`${name} is not set: replicas are started by the node agent (embers dev / embers agent), not by hand`);
    process.exit(2);
  }
  return v;
}

const config = loadConfig();
required('EMBERS_REDIS_URL');
const redis = createRedis(redisTarget(config));
const store = storeFromConfig(config);
let replica: Replica | undefined;

/** Longest a stop waits for the requests this replica holds. */
const DRAIN_DEADLINE_MS = 20_000;

let stopping = false;
async function stop(signal: string) {
  if (stopping) return;
  stopping = true;
  if (replica) log.info({ signal }, 'draining');
  // A drain that cannot finish (Redis gone while the agent is gone too: nobody sends SIGKILL)
  // must not leave this process behind. The agent itself kills a draining replica after 15 s.
  setTimeout(() => {
    log.warn(`could not drain within ${DRAIN_DEADLINE_MS / 1000} s; exiting`);
    process.exit(1);
  }, DRAIN_DEADLINE_MS).unref();
  await replica?.drain().catch((err) => log.error({ err }, 'drain failed'));
  redis.disconnect();
  store.destroy();
  process.exit(0);
}
process.on('SIGTERM', () => void stop('SIGTERM'));
// A terminal's Ctrl-C (SIGINT), and its closing (SIGHUP), reach the whole process group. A
// replica forked by an agent leaves the stopping to it: the agent stops its replicas after the
// gateway has answered what it accepted.
for (const signal of ['SIGINT', 'SIGHUP'] as const) {
  process.on(signal, () => {
    if (!process.connected) void stop(signal);
  });
}
// IPC channel closes when the agent dies: do not outlive it.
process.on('disconnect', () => void stop('agent gone'));

const limits = {
  memoryBytes: config.EMBERS_REPLICA_MEMORY_BYTES,
  pids: config.EMBERS_REPLICA_PIDS,
  openFiles: config.EMBERS_REPLICA_OPEN_FILES,
  tmpBytes: config.EMBERS_REPLICA_TMP_BYTES,
};
// What the agent found when it probed the node (it reports the same in /readyz); probed here
// only for a replica started without one.
const support: SandboxSupport = env.EMBERS_SANDBOX_SUPPORT ? (JSON.parse(env.EMBERS_SANDBOX_SUPPORT) as SandboxSupport) : probeSandbox(config.EMBERS_SANDBOX);
/** GPU device nodes, bound into the sandbox when models may run on CUDA. */
const devices = config.EMBERS_EXECUTION_PROVIDERS.some((p) => p !== 'cpu') ? (await readdir('/dev').catch(() => [] as string[])).filter((d) => /^nvidia/.test(d)).map((d) => `/dev/${d}`) : [];
// Booted with the replica (in standby too): the user code's process and sandbox are ready when
// the assignment comes. Its id names its cgroup and staging folder.
const userCode = new UserCodeProcess({
  id: `uc-${process.pid}-${Date.now().toString(36)}`,
  cacheDir: required('EMBERS_CACHE_DIR'),
  log,
  sandbox: support.isolates || support.cgroup || support.rlimits ? support : null,
  limits,
  execArgv: USER_CODE_V8_FLAGS,
  devices,
  maxAnswerBytes: config.EMBERS_MAX_ANSWER_BYTES,
});
userCode.onExit = (e) => {
  if (!replica) {
    log.error({ code: e.code, signal: e.signal }, 'the user-code process exited before its assignment');
    process.exit(1);
  }
};

const assignment: Assignment =
  env.EMBERS_REPLICA_STANDBY === '1'
    ? await new Promise<Assignment>((resolve) => {
        process.on('message', (m: Assignment) => m?.type === 'assign' && resolve(m));
        void userCode.ready().then(() => process.send?.({ type: 'standby' } satisfies ToAgent), () => {});
      })
    : {
        type: 'assign',
        id: required('EMBERS_REPLICA_ID'),
        fn: required('EMBERS_REPLICA_FUNCTION'),
        version: required('EMBERS_REPLICA_VERSION'),
        spawnedAt: Number(env.EMBERS_REPLICA_SPAWNED_AT) || Date.now(),
      };
// A version key's replica (core/names.ts) runs its function's version under that key: its own stream, replicas and metrics.
const raw = await redis.hget(keys.versions(baseKey(assignment.fn)), assignment.version);
if (!raw) {
  log.fatal({ fn: assignment.fn, version: assignment.version }, 'version not in the registry');
  process.exit(3);
}
const manifest: Manifest = { ...(JSON.parse(raw) as Manifest), name: assignment.fn };
// A host that cannot isolate runs only the default tenant's code, unless told otherwise.
const tenant = (await redis.hget(keys.function(baseKey(assignment.fn)), 'tenant')) ?? DEFAULT_TENANT;
const refuse =
  !support.isolates && !config.EMBERS_ALLOW_UNSANDBOXED && tenant !== DEFAULT_TENANT
    ? `this node cannot sandbox user code (${support.missing.join('; ')}), so it runs only the default tenant's functions (EMBERS_ALLOW_UNSANDBOXED=1 runs every tenant's)`
    : undefined;

const modelStores = new TenantStores(store, new BucketRegistry(redis, config.EMBERS_SECRETS_KEY ? new Sealer(config.EMBERS_SECRETS_KEY, 'buckets') : null), config.EMBERS_BUCKET_ALLOW_PRIVATE);
const secrets = new FunctionSecrets(redis, config.EMBERS_SECRETS_KEY ? new Sealer(config.EMBERS_SECRETS_KEY, 'secrets') : null);

replica = new Replica({
  id: assignment.id,
  manifest,
  userCode,
  memoryLimitBytes: limits.memoryBytes,
  // A standby process learns its GPU with its assignment; one started for a replica, from its environment.
  cudaVisibleDevices: assignment.env?.CUDA_VISIBLE_DEVICES ?? env.CUDA_VISIBLE_DEVICES,
  refuse,
  redis,
  store,
  tenant,
  modelStore: (uri) => modelStores.forUri(tenant, uri),
  secrets: () => secrets.open(assignment.fn),
  log,
  cacheDir: required('EMBERS_CACHE_DIR'),
  providers: config.EMBERS_EXECUTION_PROVIDERS,
  threads: config.EMBERS_ORT_THREADS,
  wideThreads: config.EMBERS_ORT_WIDE_THREADS,
  instances: ortInstances(config),
  concurrency: config.EMBERS_REPLICA_CONCURRENCY,
  batchConcurrency: config.EMBERS_BATCH_CONCURRENCY,
  batchYieldMs: config.EMBERS_BATCH_YIELD_MS,
  heartbeatMs: config.EMBERS_HEARTBEAT_MS,
  lockMs: config.EMBERS_JOB_LOCK_MS,
  spawnedAt: assignment.spawnedAt,
  node: env.EMBERS_NODE_ID,
  handlerGraceMs: config.EMBERS_HANDLER_GRACE_MS,
  modelCacheBytes: config.EMBERS_MODEL_CACHE_BYTES,
  jobRetentionS: config.EMBERS_JOB_RETENTION_S,
  // From the agent's environment, as every setting here: records carry the price in force where they ran.
  platformPricing: { perRequest: config.EMBERS_PRICE_PER_REQUEST, perComputeSecond: config.EMBERS_PRICE_PER_COMPUTE_SECOND },
  maxAnswerBytes: config.EMBERS_MAX_ANSWER_BYTES,
  calls: {
    live: new LiveQueue(redis),
    functions: new FunctionsCache(new Registry(redis, store)),
    maxDepth: config.EMBERS_MAX_CALL_DEPTH,
    queueTimeoutMs: config.EMBERS_QUEUE_TIMEOUT_MS,
    redisMemoryLimitBytes: config.EMBERS_REDIS_MEMORY_LIMIT_MB === undefined ? undefined : config.EMBERS_REDIS_MEMORY_LIMIT_MB * 2 ** 20,
  },
  // Its user code will not stop, or ended: what it answered is delivered, the rest handed over
  // (batch lines when their locks expire), and the agent starts a fresh replica after a wait.
  onStuck: () => {
    void replica!.abandon().finally(() => process.exit(EXIT_REPLACE_ME));
  },
  onUserCodeExit: (e) => {
    void replica!.abandon().finally(() => process.exit(e.violation ? EXIT_BROKE_CHANNEL : EXIT_REPLACE_ME));
  },
  onCounters: (counters) => {
    // Sent on every heartbeat, during a drain too: an agent gone meanwhile is no error here.
    if (process.connected) process.send?.({ type: 'counters', counters } satisfies ToAgent, undefined, undefined, () => {});
  },
});

try {
  const serving = await replica.start();
  // Models are fetched: the tenant's S3 clients (and their sockets) are not needed again.
  modelStores.close();
  if (serving) process.send?.({ type: 'ready' } satisfies ToAgent);
} catch {
  redis.disconnect();
  process.exit(1);
}
