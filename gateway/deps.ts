// What the gateway's routes run on: the Hono variables every request carries and the
// dependencies createApp hands each route. Types only, so any module may import them.
import type { Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import type { RedisTarget } from '../core/redis-target.ts';
import type { BatchStore } from '../core/batches.ts';
import type { BudgetStore } from '../core/budgets.ts';
import type { BucketRegistry, TenantStores } from '../core/buckets.ts';
import type { FileStore } from '../core/files.ts';
import type { JobStore } from '../core/jobs.ts';
import type { LiveQueue } from '../core/live-queue.ts';
import type { Logger } from '../core/log.ts';
import type { Registry } from '../core/registry.ts';
import type { FunctionSecrets } from '../core/secrets.ts';
import type { ObjectStore } from '../core/s3.ts';
import type { AuthContext, TenantStore } from '../core/tenants.ts';
import type { Pricing } from '../core/pricing.ts';
import type { BudgetGate } from './budget-gate.ts';
import type { FunctionsCache } from './functions-cache.ts';
import type { KeyCache } from './key-cache.ts';
import type { Metrics } from './metrics.ts';
import type { QueueDepth, RedisMemory } from './quotas.ts';
import type { ReplyHub } from './replies.ts';
import type { TailFeeds } from './tail-feed.ts';

export type GatewayEnv = { Variables: { rid: string; auth: AuthContext } };

export interface GatewayDeps {
  gatewayId: string;
  redis: Redis;
  /** Where `redis` points, and how many replicas accepted work waits for. */
  redisTarget: RedisTarget;
  store: ObjectStore;
  registry: Registry;
  tenants: TenantStore;
  /** Live keys this gateway resolved, for runs (whose enqueue re-checks them). */
  keys: KeyCache;
  /** EMBERS_ADMIN_KEY; without one, no caller is admin. */
  adminKey?: string;
  functions: FunctionsCache;
  replies: ReplyHub;
  /** Function tails this gateway reads for its callers. */
  tails: TailFeeds;
  /** The functions' live queues (sync and async requests). */
  live: LiveQueue;
  metrics: Metrics;
  log: Logger;
  maxBodyBytes: number;
  maxBundleBytes: number;
  /** Most arrays and objects a JSON body may nest (EMBERS_MAX_JSON_DEPTH); deeper is a 400. */
  maxJsonDepth: number;
  /** Webhooks may reach loopback and private addresses (EMBERS_WEBHOOK_ALLOW_PRIVATE). */
  webhookAllowPrivate?: boolean;
  /**
   * Base of every absolute URL the gateway answers with (EMBERS_PUBLIC_URL, else its listen
   * address), never built from the request's Host header, which is the caller's to write.
   */
  readonly publicUrl: string;
  /** Longest a request waits in its queue before it is answered 504. */
  queueTimeoutMs: number;
  jobs: JobStore;
  batches: BatchStore;
  /** Files API uploads (batch inputs). */
  files: FileStore;
  /** Buckets tenants registered with their own credentials. */
  buckets: BucketRegistry;
  /** Functions' secrets, sealed. */
  secrets: FunctionSecrets;
  /** Which store reads an s3:// URI a tenant named. */
  stores: TenantStores;
  /** EMBERS_BUCKET_ALLOW_PRIVATE. */
  bucketAllowPrivate: boolean;
  /** Where finished async jobs with a webhook are queued for delivery. */
  webhookQueue: Queue;
  /** Root of the per-tenant webhook signing secrets. */
  webhookSecret: string;
  maxBatchBytes: number;
  queueDepth: QueueDepth;
  /** Refuses runs once Redis's memory nears its budget. */
  redisMemory: RedisMemory;
  /** Refuses runs of a tenant that reached a monthly budget. */
  budgets: BudgetGate;
  /** Tenants' monthly budgets, set by the admin. */
  budgetStore: BudgetStore;
  /** Prices of functions that set none, charged in the records the gateway writes (a queued job it cancels). */
  defaultPricing: Pricing;
  /** Tells the scheduler work arrived for a function (throttled), so a scale from zero starts at once. */
  wake(name: string): void;
}
