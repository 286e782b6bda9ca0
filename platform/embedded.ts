// Everything in one process, as `embers dev` and the integration tests run it: Redis and S3
// (embedded unless given), the gateway, and a node agent with its replicas.
import { DEFAULT_ROLLOUT_THRESHOLDS } from '../scheduler/rollout-judge.ts';
import { randomBytes } from 'node:crypto';
import { chmod, mkdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { ortInstances, redisTarget as configuredRedis, type Config } from '../core/config.ts';
import type { RedisTarget } from '../core/redis-target.ts';
import type { Logger } from '../core/log.ts';
import { storeFromConfig, type ObjectStore } from '../core/s3.ts';
import { startGateway, type GatewayOptions, type RunningGateway } from '../gateway/server.ts';
import { startLocalRedis, type LocalRedis } from './local-redis.ts';
import { startLocalS3, type LocalS3 } from './local-s3.ts';
import { NodeAgent, type AgentOptions } from '../scheduler/agent.ts';
import type { SchedulerOptions } from '../scheduler/scheduler.ts';

export interface Platform {
  url: string;
  apiKey: string;
  /** EMBERS_ADMIN_KEY, or the one generated and kept in the data dir. */
  adminKey: string;
  redisTarget: RedisTarget;
  s3Endpoint?: string;
  /** The redis-server this platform started, if it started one (tests restart it). */
  localRedis?: LocalRedis;
  agent: NodeAgent;
  gateway: RunningGateway;
  stop(): Promise<void>;
}

/** The key `embers dev` uses when EMBERS_API_KEY is unset: generated once, kept in the data dir. */
export async function localApiKey(dataDir: string): Promise<string> {
  return localSecret(path.join(dataDir, 'api-key'));
}

/** The admin key `embers dev` uses when EMBERS_ADMIN_KEY is unset: generated once, kept in the data dir. */
export async function localAdminKey(dataDir: string): Promise<string> {
  return localSecret(path.join(dataDir, 'admin-key'));
}

/** The secrets key `embers dev` uses when EMBERS_SECRETS_KEY is unset: generated once, kept in the data dir. */
export async function localSecretsKey(dataDir: string): Promise<string> {
  return localSecret(path.join(dataDir, 'secrets-key'));
}

async function localSecret(file: string): Promise<string> {
  const existing = await readFile(file, 'utf8').catch(() => '');
  if (existing.trim()) return existing.trim();
  const key = `emb_${randomBytes(24).toString('base64url')}`;
  await writeFile(file, `${key}\n`, { mode: 0o600 });
  await chmod(file, 0o600);
  return key;
}

/** Gateway settings from config: shared by `embers dev` and a standalone `embers gateway`. */
export function gatewayOptions(config: Config, o: { redisTarget: RedisTarget; store: ObjectStore; apiKey: string; adminKey?: string; secretsKey?: string; log: Logger }): GatewayOptions {
  return {
    ...o,
    secretsKey: o.secretsKey ?? config.EMBERS_SECRETS_KEY,
    bucketAllowPrivate: config.EMBERS_BUCKET_ALLOW_PRIVATE,
    webhookSecret: config.EMBERS_WEBHOOK_SECRET,
    jobRetentionS: config.EMBERS_JOB_RETENTION_S,
    maxBatchBytes: config.EMBERS_MAX_BATCH_BYTES,
    redisMemoryLimitBytes: config.EMBERS_REDIS_MEMORY_LIMIT_MB === undefined ? undefined : config.EMBERS_REDIS_MEMORY_LIMIT_MB * 2 ** 20,
    defaultPricing: { perRequest: config.EMBERS_PRICE_PER_REQUEST, perComputeSecond: config.EMBERS_PRICE_PER_COMPUTE_SECOND },
    adminKey: o.adminKey ?? config.EMBERS_ADMIN_KEY,
    tls: config.EMBERS_TLS_CERT && config.EMBERS_TLS_KEY ? { certFile: config.EMBERS_TLS_CERT, keyFile: config.EMBERS_TLS_KEY } : undefined,
    port: config.EMBERS_PORT,
    host: config.EMBERS_HOST,
    maxBodyBytes: config.EMBERS_MAX_BODY_BYTES,
    maxBundleBytes: config.EMBERS_MAX_BUNDLE_BYTES,
    maxJsonDepth: config.EMBERS_MAX_JSON_DEPTH,
    publicUrl: config.EMBERS_PUBLIC_URL,
    webhookAllowPrivate: config.EMBERS_WEBHOOK_ALLOW_PRIVATE,
    queueTimeoutMs: config.EMBERS_QUEUE_TIMEOUT_MS,
  };
}

/**
 * Node agent settings from config: shared by `embers dev` and a standalone `embers agent`.
 * `metricsPort`: the agent's /metrics port when EMBERS_METRICS_PORT is unset (none: off).
 */
export function agentOptions(config: Config, o: { redisTarget: RedisTarget; store: ObjectStore; s3Endpoint?: string; secretsKey?: string; log: Logger; metricsPort?: number }): AgentOptions {
  const metricsPort = config.EMBERS_METRICS_PORT ?? o.metricsPort;
  const secretsKey = o.secretsKey ?? config.EMBERS_SECRETS_KEY;
  return {
    redisTarget: o.redisTarget,
    store: o.store,
    cacheDir: path.join(config.dataDir, 'cache'),
    log: o.log,
    slots: config.EMBERS_NODE_SLOTS,
    memoryBytes: config.EMBERS_NODE_MEMORY,
    heartbeatMs: Math.min(1_000, config.EMBERS_HEARTBEAT_MS),
    nodeTtlMs: config.EMBERS_NODE_TTL_MS,
    providers: config.EMBERS_EXECUTION_PROVIDERS,
    modelReplicaCores: ortInstances(config) * config.EMBERS_ORT_THREADS,
    lockMs: config.EMBERS_JOB_LOCK_MS,
    jobRetentionS: config.EMBERS_JOB_RETENTION_S,
    allowUnsandboxed: config.EMBERS_ALLOW_UNSANDBOXED,
    replaceWaitMs: config.EMBERS_REPLACE_WAIT_MS,
    sandbox: config.EMBERS_SANDBOX,
    metrics: metricsPort ? { host: config.EMBERS_METRICS_HOST, port: metricsPort } : undefined,
    scheduler: { ...schedulerOptions(config), secretsKey, bucketAllowPrivate: config.EMBERS_BUCKET_ALLOW_PRIVATE },
    // The replica process is trusted (its user code never sees these: runtime/replica/user-code-process.ts).
    replicaEnv: {
      ...(secretsKey ? { EMBERS_SECRETS_KEY: secretsKey } : {}),
      ...(o.s3Endpoint ? { EMBERS_S3_ENDPOINT: o.s3Endpoint } : {}),
      EMBERS_S3_BUCKET: config.EMBERS_S3_BUCKET,
      EMBERS_DATA_DIR: config.dataDir,
    },
  };
}

/** Time a pre-warm allows for a cold start. */
const PREWARM_COLD_START_MS = 2_000;

/** The scheduler's settings from config, typed as its own options: the agent hands them on as they are. */
function schedulerOptions(config: Config): Pick<SchedulerOptions, 'tickMs' | 'settings' | 'batchMaxOutstanding' | 'maxJsonDepth' | 'rollouts' | 'usageExport'> {
  return {
    tickMs: config.EMBERS_SCHEDULER_TICK_MS,
    usageExport: { intervalMs: config.EMBERS_USAGE_EXPORT_INTERVAL_MS, batchRecords: config.EMBERS_USAGE_EXPORT_BATCH },
    rollouts: {
      ...DEFAULT_ROLLOUT_THRESHOLDS,
      stepMs: config.EMBERS_ROLLOUT_STEP_S * 1000,
      minRequests: config.EMBERS_ROLLOUT_MIN_REQUESTS,
      maxErrorRateIncrease: config.EMBERS_ROLLOUT_MAX_ERROR_RATE_INCREASE,
      maxP99Ratio: config.EMBERS_ROLLOUT_MAX_P99_RATIO,
    },
    batchMaxOutstanding: config.EMBERS_BATCH_MAX_OUTSTANDING,
    maxJsonDepth: config.EMBERS_MAX_JSON_DEPTH,
    settings: {
      stableWindowMs: config.EMBERS_SCALE_STABLE_WINDOW_S * 1000,
      panicWindowMs: config.EMBERS_SCALE_PANIC_WINDOW_S * 1000,
      panicThreshold: 2,
      keepAlive: config.EMBERS_KEEP_ALIVE,
      // A pre-warmed replica should be ready when the window opens: a tick to notice, a cold start's time.
      prewarmLeadMs: config.EMBERS_SCHEDULER_TICK_MS + PREWARM_COLD_START_MS,
    },
  };
}

export async function startPlatform(config: Config, log: Logger, opts: { persistRedis?: boolean } = {}): Promise<Platform> {
  const stops: (() => Promise<void>)[] = [];
  const state: { localRedis?: LocalRedis } = {};
  let platform: Platform | undefined;
  const stopAll = async () => {
    for (const stop of stops.reverse()) await stop().catch((err) => log.warn({ err }, 'stop failed'));
  };
  try {
    await mkdir(config.dataDir, { recursive: true });
    let redisUrl = config.EMBERS_REDIS_URL;
    if (!redisUrl && !config.EMBERS_REDIS_SENTINELS) {
      state.localRedis = await startLocalRedis(path.join(config.dataDir, 'redis'), { persist: opts.persistRedis ?? true });
      stops.push(async () => (platform ?? state).localRedis?.stop());
      redisUrl = state.localRedis.url;
      log.info({ url: redisUrl }, 'started redis-server');
    }
    const redisTarget = configuredRedis(config, redisUrl);
    let s3Endpoint = config.EMBERS_S3_ENDPOINT;
    if (!s3Endpoint) {
      const s3: LocalS3 = await startLocalS3(path.join(config.dataDir, 's3'));
      stops.push(() => s3.stop());
      s3Endpoint = s3.endpoint;
      log.info({ endpoint: s3Endpoint }, 'started embedded S3 server');
    }
    const store = storeFromConfig({ ...config, EMBERS_S3_ENDPOINT: s3Endpoint });
    stops.push(async () => store.destroy());
    await store.ensureBucket();
    const apiKey = config.EMBERS_API_KEY ?? (await localApiKey(config.dataDir));
    const adminKey = config.EMBERS_ADMIN_KEY ?? (await localAdminKey(config.dataDir));
    const secretsKey = config.EMBERS_SECRETS_KEY ?? (await localSecretsKey(config.dataDir));

    const gateway = await startGateway(gatewayOptions(config, { redisTarget, store, apiKey, adminKey, secretsKey, log }));
    let gatewayClosed: Promise<void> | undefined;
    const closeGateway = () => (gatewayClosed ??= gateway.close());
    stops.push(closeGateway);

    const agent = new NodeAgent(agentOptions(config, { redisTarget, store, s3Endpoint, secretsKey, log }));
    await agent.start();
    // The gateway stops first: it takes nothing new and answers what it accepted while the
    // replicas still run; then the replicas drain what they hold; Redis stops last.
    stops.push(async () => {
      await closeGateway();
      await agent.close();
    });

    platform = { url: gateway.url, apiKey, adminKey, redisTarget, s3Endpoint, localRedis: state.localRedis, agent, gateway, stop: stopAll };
    return platform;
  } catch (err) {
    await stopAll();
    throw err;
  }
}
