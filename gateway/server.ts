// Starts a gateway process-part: Redis connections, reply channel, HTTP listener.
import { randomBytes, randomUUID } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { createServer as createHttpsServer } from 'node:https';
import { createSecureContext } from 'node:tls';
import type { AddressInfo, Socket } from 'node:net';
import { serve, type ServerType } from '@hono/node-server';
import { Queue } from 'bullmq';
import { BatchStore } from '../core/batches.ts';
import { BucketRegistry, TenantStores } from '../core/buckets.ts';
import { FileStore } from '../core/files.ts';
import { Sealer } from '../core/sealed.ts';
import { FunctionSecrets } from '../core/secrets.ts';
import { errorBody, type PlatformEvent } from '../core/contracts.ts';
import { DEFAULT_MAX_JSON_DEPTH } from '../core/json-depth.ts';
import { LiveQueue } from '../core/live-queue.ts';
import { JobStore } from '../core/jobs.ts';
import type { Logger } from '../core/log.ts';
import { createRedis, type Redis } from '../core/redis.ts';
import { describeRedis, type RedisTarget } from '../core/redis-target.ts';
import { closeOrDisconnect } from '../core/settle.ts';
import { Registry } from '../core/registry.ts';
import { TenantStore } from '../core/tenants.ts';
import type { ObjectStore } from '../core/s3.ts';
import { createApp } from './app.ts';
import { FunctionsCache } from './functions-cache.ts';
import { createMetrics } from './metrics.ts';
import { ReplyHub } from './replies.ts';
import { TailFeeds } from './tail-feed.ts';
import { KeyCache } from './key-cache.ts';
import { startWebhookWorker } from './webhooks.ts';
import { QueueDepth, RedisMemory } from './quotas.ts';
import type { Pricing } from '../core/pricing.ts';
import { BudgetStore } from '../core/budgets.ts';
import { BudgetGate } from './budget-gate.ts';
import { keys, QUEUE_PREFIX, WEBHOOK_QUEUE } from '../core/keys.ts';
import { waker } from '../core/wake.ts';

/** How long closing waits for requests in flight before cutting their connections. */
const CLOSE_GRACE_MS = 10_000;

export interface GatewayOptions {
  redisTarget: RedisTarget;
  store: ObjectStore;
  apiKey: string;
  /** EMBERS_ADMIN_KEY: manages tenants and keys. Without one, the tenant routes answer 403. */
  adminKey?: string;
  /** PEM files (EMBERS_TLS_CERT / EMBERS_TLS_KEY): serve HTTPS instead of HTTP. */
  tls?: { certFile: string; keyFile: string };
  port: number;
  host: string;
  log: Logger;
  maxBodyBytes: number;
  maxBundleBytes: number;
  queueTimeoutMs: number;
  /** @default 86400 */
  jobRetentionS?: number;
  /** Root of webhook signing secrets; unset, one is generated once and shared by all gateways through Redis. */
  webhookSecret?: string;
  /** @default 1 GiB */
  maxBatchBytes?: number;
  /** Most arrays and objects a JSON body may nest (EMBERS_MAX_JSON_DEPTH). @default 128 */
  maxJsonDepth?: number;
  /** Base of the absolute URLs the gateway answers with (EMBERS_PUBLIC_URL). @default its listen address */
  publicUrl?: string;
  /** EMBERS_WEBHOOK_ALLOW_PRIVATE: webhooks may reach loopback and private addresses. @default false */
  webhookAllowPrivate?: boolean;
  /** Redis memory past which runs are refused (RedisMemory); unset: from Redis's maxmemory or machine. */
  redisMemoryLimitBytes?: number;
  /** @default free */
  defaultPricing?: Pricing;
  /** EMBERS_SECRETS_KEY: seals tenants' bucket credentials and functions' secrets; without one, neither can be kept. */
  secretsKey?: string;
  /** EMBERS_BUCKET_ALLOW_PRIVATE: registered buckets may be http:// and on loopback or private addresses. @default false */
  bucketAllowPrivate?: boolean;
}

export interface RunningGateway {
  url: string;
  id: string;
  close(): Promise<void>;
}

export class GatewayStartError extends Error {
  override name = 'GatewayStartError';
}

export async function startGateway(o: GatewayOptions): Promise<RunningGateway> {
  const id = `gw-${randomUUID().slice(0, 8)}`;
  const log = o.log.child({ gateway: id });
  const tls = o.tls && (await readTls(o.tls));
  // Requests must fail fast (503) while Redis is unreachable, not queue up inside ioredis.
  const redis = createRedis(o.redisTarget, { enableOfflineQueue: false, maxRetriesPerRequest: 1 });
  const sub = createRedis(o.redisTarget);
  await new Promise<void>((resolve, reject) => {
    redis.once('ready', resolve);
    redis.once('error', (err) => reject(new GatewayStartError(`cannot reach Redis at ${describeRedis(o.redisTarget)}: ${err.message}`)));
  });
  redis.on('error', (err) => log.warn({ err: err.message }, 'redis connection error'));
  const registry = new Registry(redis, o.store);
  const tenants = new TenantStore(redis);
  try {
    const { key, replaced } = await tenants.bootstrapDefault(o.apiKey);
    if (replaced) log.warn('EMBERS_API_KEY changed: the previous platform key no longer works');
    if (key.revokedAt) log.warn({ keyId: key.id }, 'EMBERS_API_KEY was revoked by an admin: requests with it get 401; set a new one');
  } catch (err) {
    sub.disconnect();
    redis.disconnect();
    throw new GatewayStartError((err as Error).message);
  }
  const functions = new FunctionsCache(registry);
  const metrics = createMetrics();
  const replies = new ReplyHub(sub, id, (channel, message) => {
    if (channel !== keys.registryChannel) return;
    const event = JSON.parse(message) as PlatformEvent;
    if (event.type === 'deployed') functions.invalidate(event.name);
    if (event.type === 'deleted') functions.forget(event.name);
    if (event.type === 'replica') {
      functions.replicaEvent(event.name, event.state, event.error);
      if (event.coldStart) metrics.observeColdStart(event.name, event.coldStart);
    }
  }, (channel, err) => log.warn({ channel, err: err.message }, 'dropped a message that could not be read'));
  await replies.start(keys.registryChannel);

  const live = new LiveQueue(redis);

  const jobs = new JobStore(redis, o.jobRetentionS ?? 86_400);
  const webhookSecret = o.webhookSecret ?? (await sharedWebhookSecret(redis));
  const webhookQueue = new Queue(WEBHOOK_QUEUE, { connection: redis, prefix: QUEUE_PREFIX });
  webhookQueue.on('error', (err) => log.warn({ err: err.message }, 'webhook queue error'));
  let url = '';
  const webhooks = startWebhookWorker({ redisTarget: o.redisTarget, jobs, secret: webhookSecret, baseUrl: () => o.publicUrl ?? url, log, allowPrivate: o.webhookAllowPrivate });

  const tails = new TailFeeds({ redis, log });
  const buckets = new BucketRegistry(redis, o.secretsKey ? new Sealer(o.secretsKey, 'buckets') : null);
  const stores = new TenantStores(o.store, buckets, o.bucketAllowPrivate ?? false);
  const app = createApp({
    gatewayId: id,
    redisTarget: o.redisTarget,
    redis,
    store: o.store,
    registry,
    tenants,
    keys: new KeyCache(tenants),
    adminKey: o.adminKey,
    functions,
    replies,
    tails,
    live,
    metrics,
    log,
    maxBodyBytes: o.maxBodyBytes,
    maxBundleBytes: o.maxBundleBytes,
    maxJsonDepth: o.maxJsonDepth ?? DEFAULT_MAX_JSON_DEPTH,
    webhookAllowPrivate: o.webhookAllowPrivate ?? false,
    // Read when a request needs it: the listen address is known once the server listens, below.
    get publicUrl() {
      return o.publicUrl ?? url;
    },
    queueTimeoutMs: o.queueTimeoutMs,
    jobs,
    batches: new BatchStore(redis),
    files: new FileStore(redis),
    buckets,
    stores,
    secrets: new FunctionSecrets(redis, o.secretsKey ? new Sealer(o.secretsKey, 'secrets') : null),
    bucketAllowPrivate: o.bucketAllowPrivate ?? false,
    webhookQueue,
    webhookSecret,
    maxBatchBytes: o.maxBatchBytes ?? 1024 ** 3,
    queueDepth: new QueueDepth(live),
    redisMemory: new RedisMemory(redis, o.redisMemoryLimitBytes),
    budgets: new BudgetGate(redis),
    budgetStore: new BudgetStore(redis),
    defaultPricing: o.defaultPricing ?? { perRequest: 0, perComputeSecond: 0 },
    wake: waker(redis),
  });

  let server: ServerType;
  try {
    server = await new Promise<ServerType>((resolve, reject) => {
      const listen = { fetch: app.fetch, port: o.port, hostname: o.host };
      const s = tls ? serve({ ...listen, createServer: createHttpsServer, serverOptions: tls }, () => resolve(s)) : serve(listen, () => resolve(s));
      s.once('error', reject);
    });
  } catch (err) {
    await webhooks.close();
    await webhookQueue.close();
    sub.disconnect();
    redis.disconnect();
    const code = (err as NodeJS.ErrnoException).code;
    throw new GatewayStartError(
      code === 'EADDRINUSE' ? `port ${o.port} on ${o.host} is already in use: stop what holds it or set EMBERS_PORT` : `cannot listen on ${o.host}:${o.port}: ${(err as Error).message}`,
    );
  }
  server.on('clientError', answerUnparsable);
  const addr = server.address() as AddressInfo;
  const host = o.host === '0.0.0.0' || o.host === '::' ? 'localhost' : o.host;
  url = `${tls ? 'https' : 'http'}://${host}:${addr.port}`;
  log.info({ url }, 'gateway listening');
  return {
    url,
    id,
    async close() {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      const http = server as { closeIdleConnections?: () => void; closeAllConnections?: () => void };
      http.closeIdleConnections?.();
      // Requests still open after a grace period are cut rather than holding shutdown forever
      // (`embers dev` closes its gateway before its replicas, so what it accepted gets answered).
      const cut = setTimeout(() => http.closeAllConnections?.(), CLOSE_GRACE_MS);
      // Tails never finish on their own.
      tails.close();
      await closed;
      clearTimeout(cut);
      await webhooks.close();
      await closeOrDisconnect(webhookQueue, log, 'the webhook queue', 'closing the gateway');
      stores.close();
      sub.disconnect();
      redis.disconnect();
    },
  };
}

/** The platform's webhook root secret when EMBERS_WEBHOOK_SECRET is unset: the first gateway makes it. */
async function sharedWebhookSecret(redis: Redis): Promise<string> {
  await redis.set(keys.webhookSecret, `whroot_${randomBytes(32).toString('base64url')}`, 'NX');
  return (await redis.get(keys.webhookSecret))!;
}

/** Reads and checks the certificate and key, so a bad pair stops start-up naming the variables. */
async function readTls(files: { certFile: string; keyFile: string }): Promise<{ cert: Buffer; key: Buffer }> {
  const read = (file: string, variable: string) =>
    readFile(file).catch((err: Error) => {
      throw new GatewayStartError(`${variable}: cannot read ${file}: ${err.message}`);
    });
  const [cert, key] = await Promise.all([read(files.certFile, 'EMBERS_TLS_CERT'), read(files.keyFile, 'EMBERS_TLS_KEY')]);
  try {
    createSecureContext({ cert, key });
  } catch (err) {
    throw new GatewayStartError(`EMBERS_TLS_CERT / EMBERS_TLS_KEY (${files.certFile}, ${files.keyFile}) are not a PEM certificate and its private key: ${(err as Error).message}`);
  }
  return { cert, key };
}

/**
 * A request Node's HTTP parser refuses (a malformed Content-Length or chunk, a method or path it
 * cannot read, headers past its limit) is answered in the API's error shape, as every other
 * mistake is, where Node would write a bare status line; the statuses are Node's own.
 */
function answerUnparsable(err: NodeJS.ErrnoException, socket: Socket): void {
  // Gone, or a response already on its way: nothing to answer.
  if (err.code === 'ECONNRESET' || !socket.writable || socket.bytesWritten > 0) {
    socket.destroy();
    return;
  }
  const [status, reason, code, why] =
    err.code === 'HPE_HEADER_OVERFLOW'
      ? [431, 'Request Header Fields Too Large', 'headers_too_large', 'its headers are over the server\'s limit']
      : err.code === 'ERR_HTTP_REQUEST_TIMEOUT'
        ? [408, 'Request Timeout', 'timeout', 'its headers did not arrive in time']
        : err.code === 'HPE_CHUNK_EXTENSIONS_OVERFLOW'
          ? [413, 'Payload Too Large', 'too_large', 'its chunk extensions are over the server\'s limit']
          : [400, 'Bad Request', 'bad_request', `it is not valid HTTP/1.1 (${err.code ?? 'unparsable'})`];
  const body = JSON.stringify(errorBody(code, `the request could not be read: ${why}`));
  socket.end(`HTTP/1.1 ${status} ${reason}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`);
}
