// Platform configuration: EMBERS_* environment variables, validated once at start-up.
import os from 'node:os';
import { z } from 'zod';
import path from 'node:path';
import { DEFAULT_MAX_JSON_DEPTH } from './json-depth.ts';
import { parseSentinelHosts, type RedisTarget } from './redis-target.ts';

const bool = z.enum(['1', '0', 'true', 'false']).transform((v) => v === '1' || v === 'true');
const int = (min: number, max = Number.MAX_SAFE_INTEGER) => z.coerce.number().int().min(min).max(max);

/** What EMBERS_EXECUTION_PROVIDERS takes. */
export const EXECUTION_PROVIDERS = ['cpu', 'cuda', 'tensorrt'] as const;

export const ConfigSchema = z.object({
  /** Gateway port. @default 8787 */
  EMBERS_PORT: int(0, 65535).default(8787),
  /** Gateway bind address. @default 127.0.0.1 */
  EMBERS_HOST: z.string().min(1).default('127.0.0.1'),
  /** Where `embers dev` keeps Redis data, S3 data, the model cache and the generated key. @default .embers */
  EMBERS_DATA_DIR: z.string().min(1).default('.embers'),
  /**
   * Redis URL. Unset under `embers dev`: a redis-server is spawned. With EMBERS_REDIS_SENTINELS it
   * gives the primary's user, password, database and TLS (rediss:); its host is not used.
   */
  EMBERS_REDIS_URL: z.string().url().optional(),
  /**
   * Redis Sentinels, `host:port,host:port,…`: every part asks them for the primary and follows a
   * failover by itself (docs/decisions/040-redis-sentinel.md).
   */
  EMBERS_REDIS_SENTINELS: z
    .string()
    .optional()
    .superRefine((v, ctx) => {
      if (v === undefined) return;
      try {
        parseSentinelHosts(v);
      } catch (err) {
        ctx.addIssue({ code: 'custom', message: (err as Error).message });
      }
    }),
  /** The master group's name that the Sentinels monitor. @default embers */
  EMBERS_REDIS_SENTINEL_NAME: z.string().min(1).default('embers'),
  /** The Sentinels' own password (their requirepass), when they have one. */
  EMBERS_REDIS_SENTINEL_PASSWORD: z.string().min(1).optional(),
  /** Talk TLS to the Sentinels. @default false */
  EMBERS_REDIS_SENTINEL_TLS: bool.default(false),
  /**
   * Redis replicas that must hold an accepted async run, batch or deploy before the gateway
   * answers 202/201 (Redis WAIT); none confirming in EMBERS_REDIS_ACK_TIMEOUT_MS is a 503.
   * @default 1 with EMBERS_REDIS_SENTINELS, else 0
   */
  EMBERS_REDIS_ACK_REPLICAS: int(0, 16).optional(),
  /** How long the gateway waits for EMBERS_REDIS_ACK_REPLICAS. @default 2000 */
  EMBERS_REDIS_ACK_TIMEOUT_MS: int(1, 60_000).default(2_000),
  /** S3 endpoint. Unset under `embers dev`: an embedded S3 server is started on loopback. */
  EMBERS_S3_ENDPOINT: z.string().url().optional(),
  /** Bucket for bundles and uploaded models; created if missing. @default embers */
  EMBERS_S3_BUCKET: z.string().regex(/^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/, 'must be a valid S3 bucket name').default('embers'),
  /** API key for /v1. Unset under `embers dev`: one is generated and kept under the data dir. */
  EMBERS_API_KEY: z.string().min(16, 'must be at least 16 characters').optional(),
  /** Admin key: manages tenants and their API keys. Unset under `embers dev`: one is generated and kept under the data dir. */
  EMBERS_ADMIN_KEY: z.string().min(16, 'must be at least 16 characters').optional(),
  /** TLS certificate (PEM file, chain included) for the gateway; with EMBERS_TLS_KEY the gateway serves HTTPS. */
  EMBERS_TLS_CERT: z.string().min(1).optional(),
  /** TLS private key (PEM file) matching EMBERS_TLS_CERT. */
  EMBERS_TLS_KEY: z.string().min(1).optional(),
  /** Largest request body on /v1/run, in bytes. @default 10 MiB */
  EMBERS_MAX_BODY_BYTES: int(1024).default(10 * 1024 * 1024),
  /**
   * Largest answer a handler may give, in bytes (JSON or binary()); a larger one is answered 500
   * `answer_too_large`. Answers cross Redis pub/sub to the gateway. @default 16 MiB
   */
  EMBERS_MAX_ANSWER_BYTES: int(1024).default(16 * 1024 * 1024),
  /**
   * Redis memory (MiB) past which the gateway refuses runs with 503 `redis_full` (queued
   * requests carry their bodies). @default 90 % of Redis's maxmemory, else half its machine's memory
   */
  EMBERS_REDIS_MEMORY_LIMIT_MB: int(1).optional(),
  /** Largest deploy body (bundle + manifest), in bytes. @default 50 MiB */
  EMBERS_MAX_BUNDLE_BYTES: int(1024).default(50 * 1024 * 1024),
  /**
   * Most arrays and objects a caller's JSON may nest (run bodies, deploys, batch lines); deeper is
   * refused 400 `too_deep`. At most 1000: past a few thousand, JSON.stringify in a replica runs
   * out of stack. @default 128
   */
  EMBERS_MAX_JSON_DEPTH: int(16, 1000).default(DEFAULT_MAX_JSON_DEPTH),
  /**
   * Base of the absolute URLs the gateway answers with (an async run's `url` and `Location`, job
   * and batch urls, function endpoints): how callers reach it, e.g. through a proxy. Never taken
   * from a request's Host header. @default the gateway's listen address (http://127.0.0.1:8787)
   */
  EMBERS_PUBLIC_URL: z
    .string()
    .refine(isBaseUrl, 'must be an http or https URL with no query or fragment, e.g. https://embers.example.com')
    .transform((s) => s.replace(/\/+$/, ''))
    .optional(),
  /** pino level. @default info */
  EMBERS_LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
  /** Execution providers in order of preference: `cuda,cpu` uses the GPU when present. @default cpu */
  EMBERS_EXECUTION_PROVIDERS: z
    .string()
    .default('cpu')
    .transform((s) => s.split(',').map((p) => p.trim()).filter(Boolean))
    .pipe(z.array(z.enum(EXECUTION_PROVIDERS)).min(1)),
  /** ORT intra-op threads per model session; 1 avoids oversubscribing small machines. @default 1 */
  EMBERS_ORT_THREADS: int(1, 256).default(1),
  /**
   * On CPU, intra-op threads of a model's wide inline session, used by an inference that has its
   * replica to itself (one request in flight), beside a narrow inline one (EMBERS_ORT_THREADS):
   * both run on the process's own thread, and each lone inference takes the one measured faster.
   * Costs two more copies of each model in memory, loaded once a lone request asks. 0 turns them off.
   * @default the machine's cores
   */
  EMBERS_ORT_WIDE_THREADS: int(0, 256).default(os.availableParallelism()),
  /**
   * On CPU, sessions per model in a replica that may run at once (Triton's instance count), one
   * per core by default: inferences of concurrent requests run side by side. Each is a copy of
   * the model in memory; the first is loaded before the replica is ready, the others after.
   * @default cores ÷ EMBERS_ORT_THREADS, at most 4 (more: set it)
   */
  EMBERS_ORT_INSTANCES: int(1, 256).optional(),
  /** Jobs a replica holds in flight, so batches can fill. @default 32 */
  EMBERS_REPLICA_CONCURRENCY: int(1, 4096).default(32),
  /** Batch lines a replica holds in flight, in slots apart from the live ones. @default 8 */
  EMBERS_BATCH_CONCURRENCY: int(1, 4096).default(8),
  /** Batch lines start no model inference while a live request runs on the node, nor for this long after the last one. @default 50 */
  EMBERS_BATCH_YIELD_MS: int(0, 60_000).default(50),
  /** Longest chain of calls (`ctx.call`) from one request; a deeper call is refused with 508 call_depth_exceeded. @default 8 */
  EMBERS_MAX_CALL_DEPTH: int(1, 64).default(8),
  /** Longest a request may wait in its queue (a cold start included) before it is answered 504. @default 60000 */
  EMBERS_QUEUE_TIMEOUT_MS: int(100).default(60_000),
  /** Replica heartbeat period; a replica missing 3 is considered gone. @default 2000 */
  EMBERS_HEARTBEAT_MS: int(50).default(2000),
  /** How long a replica that stops answering holds its work: live requests (stream entries) and batch jobs (BullMQ's lock) are taken over after this. @default 30000 */
  EMBERS_JOB_LOCK_MS: int(1000).default(30_000),
  /** Replica slots this node agent offers. @default 2 × CPU cores */
  EMBERS_NODE_SLOTS: int(1, 4096).optional(),
  /** Memory (bytes) this node's replicas may hold together; placement packs replicas by their measured footprints. @default 80 % of the machine's */
  EMBERS_NODE_MEMORY: int(64 * 2 ** 20).optional(),
  /** A node agent silent this long is gone and its replicas are placed elsewhere. @default 10000 */
  EMBERS_NODE_TTL_MS: int(500).default(10_000),
  /** Scaling: averaging window, and how long scale-down waits. @default 60 */
  EMBERS_SCALE_STABLE_WINDOW_S: z.coerce.number().min(0.1).default(60),
  /** 'auto': keep-alive learned per function from its idle times (scheduler/keep-alive.ts); 'fixed': always the function's idleTimeoutS (300 s for 'auto'). @default auto */
  EMBERS_KEEP_ALIVE: z.enum(['auto', 'fixed']).default('auto'),
  /** Scaling: short window that reacts to bursts at once. @default 6 */
  EMBERS_SCALE_PANIC_WINDOW_S: z.coerce.number().min(0.1).default(6),
  /** How often the leading scheduler decides. @default 500 */
  EMBERS_SCHEDULER_TICK_MS: int(50).default(500),
  /** Automatic rollouts: how long each step (10 %, 50 %) lasts at least. @default 300 */
  EMBERS_ROLLOUT_STEP_S: z.coerce.number().min(0).default(300),
  /** Automatic rollouts: requests the new version serves in a step before it is judged. @default 100 */
  EMBERS_ROLLOUT_MIN_REQUESTS: int(1).default(100),
  /** Automatic rollouts: how far (a fraction) the new version's server error rate may be above the active one's. @default 0.01 */
  EMBERS_ROLLOUT_MAX_ERROR_RATE_INCREASE: z.coerce.number().min(0).max(1).default(0.01),
  /** Automatic rollouts: the new version's p99 may be up to this multiple of the active one's (plus 50 ms). @default 1.5 */
  EMBERS_ROLLOUT_MAX_P99_RATIO: z.coerce.number().min(1).default(1.5),
  /** A replica whose user code failed while serving (broke its channel, crashed, ran out of memory, would not stop) is replaced after this long, doubling with each failure of its function up to a minute (forgotten after five quiet minutes). @default 1000 */
  EMBERS_REPLACE_WAIT_MS: int(0).default(1_000),
  /** A handler still running this long after its timeout gets its replica replaced. @default 5000 */
  EMBERS_HANDLER_GRACE_MS: int(0).default(5_000),
  /** Memory a replica's user-code process may use (cgroup); over it, it is killed and the request answered 503 replica_oom. @default 4 GiB */
  EMBERS_REPLICA_MEMORY_BYTES: int(64 * 1024 ** 2).default(4 * 1024 ** 3),
  /** Processes and threads a replica's user-code process may have. @default 1024 */
  EMBERS_REPLICA_PIDS: int(16).default(1024),
  /** Files a replica's user-code process may hold open. @default 4096 */
  EMBERS_REPLICA_OPEN_FILES: int(64).default(4096),
  /** Size of a replica's private /tmp (tmpfs, counted in its memory). @default 64 MiB */
  EMBERS_REPLICA_TMP_BYTES: int(1024 ** 2).default(64 * 1024 ** 2),
  /** Run every tenant's code where this host cannot sandbox it (no bwrap, no user namespaces); otherwise only the default tenant's functions run there. @default false */
  EMBERS_ALLOW_UNSANDBOXED: bool.default(false),
  /** `auto`: sandbox user code where the host allows; `off`: never (the node then counts as one that cannot isolate). @default auto */
  EMBERS_SANDBOX: z.enum(['auto', 'off']).default('auto'),
  /** Node model cache bound (LRU beyond it). @default 20 GiB */
  EMBERS_MODEL_CACHE_BYTES: int(1).default(20 * 1024 ** 3),
  /** How long an async job's result is kept after it finishes; later it answers 404 "expired". @default 86400 (1 day) */
  EMBERS_JOB_RETENTION_S: int(1).default(86_400),
  /** Let webhooks reach loopback, private and link-local addresses (receivers on this machine or network). @default false */
  EMBERS_WEBHOOK_ALLOW_PRIVATE: bool.default(false),
  /** Let registered buckets' endpoints be http:// and reach loopback, private and link-local addresses (S3 servers on this machine or network). @default false */
  EMBERS_BUCKET_ALLOW_PRIVATE: bool.default(false),
  /**
   * Seals secrets kept in Redis (tenants' bucket credentials); the same on every gateway, agent and
   * replica. Unset under `embers dev`: generated once and kept under the data dir; unset elsewhere,
   * buckets cannot be registered.
   */
  EMBERS_SECRETS_KEY: z.string().min(32, 'must be at least 32 characters (e.g. `openssl rand -base64 32`)').optional(),
  /** Root secret webhook signatures derive from (one secret per tenant). Unset: generated once and kept in Redis for every gateway. */
  EMBERS_WEBHOOK_SECRET: z.string().min(16, 'must be at least 16 characters').optional(),
  /** Largest batch input uploaded through POST /v1/batches, in bytes. @default 1 GiB */
  EMBERS_MAX_BATCH_BYTES: int(1024).default(1024 ** 3),
  /** Batch lines a batch keeps in its function's queue at once; the feeder adds more as they finish. @default 256 */
  EMBERS_BATCH_MAX_OUTSTANDING: int(1, 100_000).default(256),
  /**
   * How long the leading scheduler waits between exports of raw usage records to S3 when the last
   * batch was not full; a full batch is followed by the next at once. Redis holds what waits.
   * @default 5000
   */
  EMBERS_USAGE_EXPORT_INTERVAL_MS: int(10, 3_600_000).default(5_000),
  /** Most usage records one export batch takes from Redis (its files: one per tenant and hour in it). @default 20000 */
  EMBERS_USAGE_EXPORT_BATCH: int(1, 1_000_000).default(20_000),
  /** Price per request for functions that set no `pricing`: each replica reads it as it starts and charges it in its usage records. @default 0 */
  EMBERS_PRICE_PER_REQUEST: z.coerce.number().min(0).default(0),
  /** Price per compute-second (handler wall time) for functions that set no `pricing`. @default 0 */
  EMBERS_PRICE_PER_COMPUTE_SECOND: z.coerce.number().min(0).default(0),
  /**
   * Port of a node agent's Prometheus `/metrics` (replica starts and exits, batching, usage); 0
   * turns it off. It needs no key: keep it reachable by Prometheus alone.
   * @default 9464 under `embers agent`; off under `embers dev` and the tests unless set
   */
  EMBERS_METRICS_PORT: int(0, 65535).optional(),
  /** Bind address of a node agent's `/metrics`. @default 127.0.0.1 */
  EMBERS_METRICS_HOST: z.string().min(1).default('127.0.0.1'),
  /** Pretty logs. @default on when stdout is a terminal */
  EMBERS_LOG_PRETTY: bool.optional(),
});

/** An absolute http(s) URL that other paths can be appended to. */
function isBaseUrl(s: string): boolean {
  if (!URL.canParse(s)) return false;
  const u = new URL(s);
  return (u.protocol === 'http:' || u.protocol === 'https:') && u.search === '' && u.hash === '' && !s.includes('?') && !s.includes('#');
}

export type Config = z.infer<typeof ConfigSchema> & { dataDir: string };

export class ConfigError extends Error {
  override name = 'ConfigError';
}

/** Variables that only make sense together. */
const CheckedConfigSchema = ConfigSchema.superRefine((c, ctx) => {
  const both = 'HTTPS needs both the certificate and its key';
  if (c.EMBERS_TLS_CERT && !c.EMBERS_TLS_KEY) ctx.addIssue({ code: 'custom', path: ['EMBERS_TLS_KEY'], message: `set it too: EMBERS_TLS_CERT is set, and ${both}` });
  if (c.EMBERS_TLS_KEY && !c.EMBERS_TLS_CERT) ctx.addIssue({ code: 'custom', path: ['EMBERS_TLS_CERT'], message: `set it too: EMBERS_TLS_KEY is set, and ${both}` });
  if (c.EMBERS_ADMIN_KEY && c.EMBERS_ADMIN_KEY === c.EMBERS_API_KEY) ctx.addIssue({ code: 'custom', path: ['EMBERS_ADMIN_KEY'], message: 'must differ from EMBERS_API_KEY' });
});

/** Validates the environment; throws ConfigError naming every bad variable. */
export function loadConfig(env: NodeJS.ProcessEnv = process.env): Config {
  const picked = Object.fromEntries(Object.entries(env).filter(([k, v]) => k.startsWith('EMBERS_') && v !== ''));
  const parsed = CheckedConfigSchema.safeParse(picked);
  if (!parsed.success) {
    const lines = parsed.error.issues.map((i) => `  ${String(i.path[0])}: ${i.message}`);
    throw new ConfigError(`invalid configuration:\n${lines.join('\n')}`);
  }
  return { ...parsed.data, dataDir: path.resolve(parsed.data.EMBERS_DATA_DIR) };
}

/**
 * The Redis every part uses, from EMBERS_REDIS_*; `url`: the one `embers dev` started, where
 * EMBERS_REDIS_URL is unset.
 */
export function redisTarget(config: Config, url = config.EMBERS_REDIS_URL): RedisTarget {
  const sentinels = config.EMBERS_REDIS_SENTINELS;
  const sentinel = sentinels
    ? { hosts: parseSentinelHosts(sentinels), name: config.EMBERS_REDIS_SENTINEL_NAME, password: config.EMBERS_REDIS_SENTINEL_PASSWORD, tls: config.EMBERS_REDIS_SENTINEL_TLS }
    : undefined;
  if (!url && !sentinel) throw new ConfigError('set EMBERS_REDIS_URL or EMBERS_REDIS_SENTINELS: separate gateways and agents share one Redis (use `embers dev` for everything in one process)');
  return {
    url: url ?? `redis://${encodeURIComponent(config.EMBERS_REDIS_SENTINEL_NAME)}`,
    sentinel,
    ackReplicas: config.EMBERS_REDIS_ACK_REPLICAS ?? (sentinel ? 1 : 0),
    ackTimeoutMs: config.EMBERS_REDIS_ACK_TIMEOUT_MS,
  };
}

/** Most model sessions per model by default: each is a copy of the model in memory. */
const DEFAULT_MAX_INSTANCES = 4;

/** Model sessions per model in a replica on CPU: EMBERS_ORT_INSTANCES, else one per EMBERS_ORT_THREADS cores, at most 4. */
export function ortInstances(config: Pick<Config, 'EMBERS_ORT_INSTANCES' | 'EMBERS_ORT_THREADS'>): number {
  return config.EMBERS_ORT_INSTANCES ?? Math.max(1, Math.min(DEFAULT_MAX_INSTANCES, Math.floor(os.availableParallelism() / config.EMBERS_ORT_THREADS)));
}
