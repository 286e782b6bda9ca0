// A replica: one process serving one function version. Loads the bundle and models, runs
// setup, then consumes the function's queue, batching model calls across requests.
import { rename, stat, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { Worker, type Job } from 'bullmq';
import type { Redis } from 'ioredis';
import { z } from 'zod';
import { linkPlatformModules } from '../core/bundle-dir.ts';
import { encodeReply, errorBody, keys, QUEUE_PREFIX, type Manifest, type ReplyHeader, type RunJobData } from '../core/contracts.ts';
import type { Logger } from '../core/log.ts';
import type { ObjectStore } from '../core/s3.ts';
import { ModelSession, type ExecutionProvider } from '../native/session.ts';
import type { Feeds } from '../native/tensor.ts';
import { DynamicBatcher } from './batcher.ts';
import { ModelCache } from './model-cache.ts';
import { HandlerError, isFunctionDefinition, type FunctionDefinition, type HandlerContext, type ModelHandle } from './sdk.ts';

export type ReplicaState = 'starting' | 'ready' | 'draining' | 'failed';

export interface ColdStart {
  spawnMs: number;
  bundleMs: number;
  modelFetchMs: number;
  modelLoadMs: number;
  setupMs: number;
  warmupMs: number;
  totalMs: number;
}

export interface ReplicaOptions {
  id: string;
  manifest: Manifest;
  redis: Redis;
  store: ObjectStore;
  log: Logger;
  cacheDir: string;
  providers: ExecutionProvider[];
  threads: number;
  concurrency: number;
  heartbeatMs: number;
  lockMs: number;
  /** When the node agent spawned this process (ms since epoch), for the spawn phase. */
  spawnedAt?: number;
}

interface LoadedModel {
  session: ModelSession;
  batcher: DynamicBatcher;
}

/** The replica's own record, written on every heartbeat and read by the API and the scheduler. */
export interface ReplicaRecord {
  id: string;
  function: string;
  version: string;
  pid: number;
  host: string;
  state: ReplicaState;
  startedAt: string;
  coldStart?: ColdStart;
  error?: { phase: string; message: string };
  jobs: { active: number; completed: number; failed: number };
  models: Record<string, { provider: string; fallback?: string } & DynamicBatcher['stats']>;
}

export class Replica {
  private state: ReplicaState = 'starting';
  private def!: FunctionDefinition;
  private readonly models = new Map<string, LoadedModel>();
  private worker?: Worker;
  private heartbeat?: NodeJS.Timeout;
  private coldStart?: ColdStart;
  private error?: ReplicaRecord['error'];
  private readonly jobs = { active: 0, completed: 0, failed: 0 };
  private readonly startedAt = new Date();
  private readonly log: Logger;

  constructor(private readonly o: ReplicaOptions) {
    this.log = o.log.child({ replica: o.id, fn: o.manifest.name, version: o.manifest.version });
  }

  record(): ReplicaRecord {
    const models: ReplicaRecord['models'] = {};
    for (const [name, m] of this.models) models[name] = { provider: m.session.provider, fallback: m.session.fallback, ...m.batcher.stats };
    return {
      id: this.o.id,
      function: this.o.manifest.name,
      version: this.o.manifest.version,
      pid: process.pid,
      host: os.hostname(),
      state: this.state,
      startedAt: this.startedAt.toISOString(),
      coldStart: this.coldStart,
      error: this.error,
      jobs: { ...this.jobs },
      models,
    };
  }

  async start(): Promise<void> {
    const { manifest } = this.o;
    // spawn: from the agent's spawn() to this process running our code.
    const began = this.o.spawnedAt ?? Date.now();
    const spawnMs = Math.max(0, Date.now() - began);
    await this.beat();
    this.heartbeat = setInterval(() => void this.beat().catch((err) => this.log.warn({ err }, 'heartbeat failed')), this.o.heartbeatMs);
    let phase = 'bundle';
    try {
      const tBundle = performance.now();
      this.def = await this.loadBundle();
      const bundleMs = performance.now() - tBundle;

      phase = 'model_fetch';
      const tFetch = performance.now();
      const cache = new ModelCache(path.join(this.o.cacheDir, 'models'), this.o.store);
      const files = await Promise.all(Object.entries(manifest.models).map(async ([name, uri]) => [name, await cache.fetch(uri)] as const));
      const modelFetchMs = files.every(([, f]) => f.hit) ? 0 : performance.now() - tFetch;

      phase = 'model_load';
      const tLoad = performance.now();
      for (const [name, file] of files) {
        const session = await ModelSession.create({ path: file.path, providers: this.o.providers, threads: this.o.threads });
        if (session.fallback) this.log.warn({ model: name }, session.fallback);
        const batcher = new DynamicBatcher({ ...manifest.batching, execute: (feeds) => session.run(feeds) });
        this.models.set(name, { session, batcher });
      }
      const modelLoadMs = performance.now() - tLoad;

      phase = 'setup';
      const tSetup = performance.now();
      await this.def.setup?.({ models: this.handles(), log: this.log, fn: { name: manifest.name, version: manifest.version } });
      const setupMs = performance.now() - tSetup;

      this.coldStart = { spawnMs, bundleMs, modelFetchMs, modelLoadMs, setupMs, warmupMs: 0, totalMs: Date.now() - began };
    } catch (err) {
      this.state = 'failed';
      this.error = { phase, message: (err as Error).message };
      this.log.error({ err, phase }, 'replica failed to start');
      await this.beat().catch(() => {});
      throw err;
    }
    this.worker = new Worker<RunJobData>(manifest.name, (job, _token, signal) => this.process(job, signal), {
      connection: this.o.redis,
      prefix: QUEUE_PREFIX,
      concurrency: this.o.concurrency,
      lockDuration: this.o.lockMs,
      stalledInterval: Math.max(500, Math.floor(this.o.lockMs / 2)),
      // We answer poison jobs ourselves (see process); BullMQ must not fail them silently first.
      maxStalledCount: MAX_CRASHES + 1,
      removeOnComplete: { count: 0 },
      removeOnFail: { count: 100 },
    });
    this.worker.on('error', (err) => this.log.error({ err }, 'queue worker error'));
    this.state = 'ready';
    await this.beat();
    this.log.info({ coldStart: this.coldStart }, 'replica ready');
  }

  /** Takes no more jobs, finishes those it holds, then releases its models. */
  async drain(): Promise<void> {
    if (this.state === 'draining') return;
    this.state = 'draining';
    await this.beat().catch(() => {});
    await this.worker?.close();
    clearInterval(this.heartbeat);
    await Promise.all([...this.models.values()].map((m) => m.session.close()));
    await this.o.redis.multi().del(keys.replica(this.o.id)).srem(keys.replicas(this.o.manifest.name), this.o.id).exec().catch(() => {});
  }

  private async beat(): Promise<void> {
    const ttl = this.o.heartbeatMs * 3;
    await this.o.redis
      .multi()
      .set(keys.replica(this.o.id), JSON.stringify(this.record()), 'PX', ttl)
      .sadd(keys.replicas(this.o.manifest.name), this.o.id)
      .exec();
  }

  private async loadBundle(): Promise<FunctionDefinition> {
    const { bundle } = this.o.manifest;
    const file = path.join(this.o.cacheDir, 'bundles', `${bundle.sha256}.mjs`);
    if (!(await stat(file).catch(() => null))) {
      await linkPlatformModules(path.dirname(file));
      const tmp = `${file}.${process.pid}.tmp.mjs`;
      await writeFile(tmp, await this.o.store.get(bundle.key));
      await rename(tmp, file);
    }
    const mod = (await import(pathToFileURL(file).href)) as { default?: unknown };
    if (!isFunctionDefinition(mod.default)) throw new Error('bundle has no default export made with defineFunction()');
    return mod.default;
  }

  private handles(onInfer?: (ms: number) => void): Record<string, ModelHandle> {
    const out: Record<string, ModelHandle> = {};
    for (const [name, m] of this.models) {
      out[name] = {
        inputNames: m.session.inputNames,
        outputNames: m.session.outputNames,
        run: async (feeds: Feeds) => {
          const r = await m.batcher.run(feeds);
          onInfer?.(r.inferMs);
          return r.outputs;
        },
      };
    }
    return out;
  }

  private async process(job: Job<RunJobData>, jobSignal?: AbortSignal): Promise<void> {
    const { rid, gw, input, enq, deadline } = job.data;
    const started = Date.now();
    const timing = { queueMs: Math.max(0, started - enq), handlerMs: 0, inferMs: 0 };
    this.jobs.active++;
    let status = 200;
    let body = '';
    const log = this.log.child({ rid });
    try {
      if ((job.stalledCounter ?? 0) >= MAX_CRASHES) {
        // Replicas died twice while holding this request: it is likely the cause. Answer, don't run.
        status = 500;
        body = JSON.stringify(errorBody('replica_crashed', `${this.o.manifest.name}: the replica crashed ${job.stalledCounter} times while running this request; it was not retried again`));
        log.error({ stalled: job.stalledCounter }, 'poison request answered without running');
        return;
      }
      const parsed = (this.def.input as z.ZodType).safeParse(input);
      if (!parsed.success) {
        status = 400;
        body = JSON.stringify(errorBody('invalid_input', `input does not match the schema of ${this.o.manifest.name}: ${z.prettifyError(parsed.error)}`, parsed.error.issues));
      } else {
        const result = await this.runHandler(parsed.data, rid, deadline, jobSignal, timing, log);
        body = JSON.stringify(result ?? null);
      }
    } catch (err) {
      ({ status, body } = errorReply(err, this.o.manifest, log));
    } finally {
      this.jobs.active--;
      timing.handlerMs = Date.now() - started;
      await this.reply(gw, { rid, status, replica: this.o.id, timing }, body);
    }
  }

  private async reply(gw: string, header: ReplyHeader, body: string): Promise<void> {
    if (header.status >= 500) this.jobs.failed++;
    else this.jobs.completed++;
    await this.o.redis.publish(keys.replyChannel(gw), encodeReply(header, body));
  }

  private async runHandler(input: unknown, rid: string, deadline: number, jobSignal: AbortSignal | undefined, timing: { inferMs: number }, log: Logger): Promise<unknown> {
    if (Date.now() > deadline) throw new TimeoutError(`request waited in the queue past its limit (EMBERS_QUEUE_TIMEOUT_MS) before a replica could run it`);
    const budget = this.o.manifest.timeoutMs;
    const ctl = new AbortController();
    jobSignal?.addEventListener('abort', () => ctl.abort(jobSignal.reason), { once: true });
    const ctx: HandlerContext = {
      models: this.handles((ms) => (timing.inferMs += ms)),
      log,
      requestId: rid,
      signal: ctl.signal,
      fn: { name: this.o.manifest.name, version: this.o.manifest.version },
    };
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        ctl.abort(new TimeoutError(`handler ran past ${budget} ms`));
        reject(new TimeoutError(`${this.o.manifest.name} did not finish within ${this.o.manifest.timeoutMs} ms`));
      }, budget);
    });
    try {
      return await Promise.race([Promise.resolve().then(() => this.def.handler(input, ctx)), timeout]);
    } finally {
      clearTimeout(timer);
    }
  }
}

/** A request whose replica died this many times is answered 500 instead of run again. */
const MAX_CRASHES = 2;

export class TimeoutError extends Error {
  override name = 'TimeoutError';
}

function errorReply(err: unknown, manifest: Manifest, log: Logger): { status: number; body: string } {
  if (err instanceof HandlerError || (err as Error)?.name === 'HandlerError') {
    const e = err as HandlerError;
    return { status: e.status, body: JSON.stringify(errorBody(e.code, e.message)) };
  }
  if (err instanceof TimeoutError) return { status: 504, body: JSON.stringify(errorBody('timeout', err.message)) };
  log.error({ err }, 'handler failed');
  const message = err instanceof Error ? err.message : String(err);
  return { status: 500, body: JSON.stringify(errorBody('handler_error', `${manifest.name} ${manifest.version} failed: ${message}`)) };
}
