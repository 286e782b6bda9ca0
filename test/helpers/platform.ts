// Starts the whole platform for a test file: a real redis-server on a free port, the embedded
// S3 server, the gateway and a node agent with real replica processes. Nothing is mocked.
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import sharp from 'sharp';
import { loadConfig } from '../../core/config.ts';
import { createRedis, type Redis } from '../../core/redis.ts';
import { createLogger } from '../../core/log.ts';
import { EmbersClient } from '../../cli/client.ts';
import { deployFile } from '../../cli/deploy.ts';
import { agentOptions, gatewayOptions, localSecretsKey, startPlatform, type Platform } from '../../platform/embedded.ts';
import { storeFromConfig, type ObjectStore } from '../../core/s3.ts';
import { startGateway } from '../../gateway/server.ts';
import { NodeAgent } from '../../scheduler/agent.ts';

export const ROOT = fileURLToPath(new URL('../..', import.meta.url));
export const fixture = (name: string) => path.join(ROOT, 'test/fixtures/functions', name);
export const shipped = (name: string) => path.join(ROOT, 'functions', name);

export interface TestPlatform extends Platform {
  client: EmbersClient;
  dataDir: string;
  deploy(file: string): ReturnType<typeof deployFile>;
  /** fetch against the gateway with the API key unless headers say otherwise. */
  fetch(route: string, init?: RequestInit): Promise<Response>;
  /** The platform's Redis URL (under Sentinel: the primary's credentials only). */
  redisUrl: string;
  /** A Redis client on the platform's Redis, for reading what the parts record. */
  redis(): Redis;
  /**
   * Stops the gateway and the node agent (its scheduler, batch feeder and replicas; `kill`
   * SIGKILLs the replicas first) and starts new ones on the same Redis and S3.
   */
  restart(o?: { kill?: boolean }): Promise<void>;
  /** Another node agent on the same Redis and S3, as on a second machine; closed with the platform. */
  startAgent(): Promise<NodeAgent>;
  close(): Promise<void>;
}

/** Settings replicas inherit through the environment: fast heartbeats and lock expiry for tests. */
const TEST_ENV: Record<string, string> = {
  EMBERS_LOG_LEVEL: 'warn',
  EMBERS_LOG_PRETTY: 'false',
  EMBERS_HEARTBEAT_MS: '200',
  EMBERS_JOB_LOCK_MS: '2000',
  // And agents a test starts as processes (`embers agent`): no /metrics, where two would want its default port.
  EMBERS_METRICS_PORT: '0',
  // Usage records stay in Redis, where tests read them, after the leader's first export (as it
  // starts leading); test/integration/usage-export.test.ts drives exporters itself.
  EMBERS_USAGE_EXPORT_INTERVAL_MS: '3600000',
};

export async function startTestPlatform(env: Record<string, string> = {}): Promise<TestPlatform> {
  const dataDir = await mkdtemp(path.join(os.tmpdir(), 'embers-test-'));
  Object.assign(process.env, TEST_ENV, env);
  for (const k of ['EMBERS_REDIS_URL', 'EMBERS_REDIS_SENTINELS', 'EMBERS_S3_ENDPOINT', 'EMBERS_API_KEY']) if (!(k in env)) delete process.env[k];
  const config = loadConfig({ ...process.env, EMBERS_DATA_DIR: dataDir, EMBERS_PORT: '0' });
  const log = createLogger('test', 'warn');
  // Append-only file on, as under `npm start`: a restarted redis-server keeps the registry.
  const platform = await startPlatform(config, log, { persistRedis: true });
  let client = new EmbersClient({ url: platform.url, apiKey: platform.apiKey });
  let redis: Redis | undefined;
  const restarted: (() => Promise<void>)[] = [];
  /** A store of its own and the platform's secrets key, as another process on the same S3 would have. */
  const sharedParts = async () => ({ store: storeFromConfig({ ...config, EMBERS_S3_ENDPOINT: platform.s3Endpoint }), secretsKey: await localSecretsKey(config.dataDir) });
  const agentOn = (store: ObjectStore, secretsKey: string) => new NodeAgent(agentOptions(config, { redisTarget: platform.redisTarget, store, s3Endpoint: platform.s3Endpoint, secretsKey, log }));
  const tp: TestPlatform = {
    ...platform,
    get client() {
      return client;
    },
    dataDir,
    deploy: (file) => deployFile(client, file),
    fetch: (route, init = {}) => {
      const headers = new Headers(init.headers);
      if (!headers.has('authorization')) headers.set('authorization', `Bearer ${platform.apiKey}`);
      return fetch(`${tp.url}${route}`, { ...init, headers });
    },
    redisUrl: platform.redisTarget.url,
    redis: () => (redis ??= createRedis(platform.redisTarget)),
    async restart(o = {}) {
      if (o.kill) for (const r of tp.agent.running()) if (r.pid) process.kill(r.pid, 'SIGKILL');
      await tp.agent.close();
      await tp.gateway.close();
      const { store, secretsKey } = await sharedParts();
      tp.gateway = await startGateway(gatewayOptions(config, { redisTarget: platform.redisTarget, store, apiKey: platform.apiKey, secretsKey, log }));
      tp.agent = agentOn(store, secretsKey);
      await tp.agent.start();
      tp.url = tp.gateway.url;
      client = new EmbersClient({ url: tp.url, apiKey: platform.apiKey });
      const { gateway, agent } = tp;
      restarted.push(async () => {
        await agent.close();
        await gateway.close();
        store.destroy();
      });
    },
    async startAgent() {
      const { store, secretsKey } = await sharedParts();
      const agent = agentOn(store, secretsKey);
      await agent.start();
      restarted.push(async () => {
        await agent.close();
        store.destroy();
      });
      return agent;
    },
    async close() {
      redis?.disconnect();
      for (const stop of restarted) await stop().catch(() => {});
      await platform.stop();
      // A test may have replaced the redis-server (an outage test restarts it): stop that one too.
      if (tp.localRedis !== platform.localRedis) await tp.localRedis?.stop();
      await rm(dataDir, { recursive: true, force: true });
    },
  };
  return tp;
}

/** A new tenant named `name` and a key of it with every scope, made with the admin key. */
export async function tenantWithKey(p: TestPlatform, name: string): Promise<{ id: string; key: string }> {
  const admin = (route: string, body: unknown) => p.fetch(route, { method: 'POST', body: JSON.stringify(body), headers: { authorization: `Bearer ${p.adminKey}`, 'content-type': 'application/json' } });
  const created = async <T>(res: Promise<Response>): Promise<T> => {
    const r = await res;
    if (r.status !== 201) throw new Error(`expected 201, got ${r.status}: ${await r.text()}`);
    return (await r.json()) as T;
  };
  const { id } = await created<{ id: string }>(admin('/v1/tenants', { name }));
  const { key } = await created<{ key: string }>(admin(`/v1/tenants/${id}/keys`, {}));
  return { id, key };
}

/** Whether a process with this pid exists (signal 0). */
export const alive = (pid: number): boolean => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

/** Polls until check returns a value (not a timing assertion: it only bounds how long to wait). */
export async function eventually<T>(check: () => Promise<T | undefined | null | false>, what: string, timeoutMs = 30_000): Promise<T> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await check();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** A PNG of black text on white, rendered with sharp from SVG. */
export async function textImage(lines: string[], width = 520): Promise<Buffer> {
  const height = 40 + lines.length * 60;
  const texts = lines.map((l, i) => `<text x="16" y="${60 + i * 60}" font-size="40" font-family="DejaVu Sans">${l}</text>`).join('');
  const svg = `<svg width="${width}" height="${height}" xmlns="http://www.w3.org/2000/svg"><rect width="100%" height="100%" fill="white"/>${texts}</svg>`;
  return sharp(Buffer.from(svg)).png().toBuffer();
}
