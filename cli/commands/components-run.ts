// What `embers gateway` and `embers agent` run (components.ts defines the commands): each checks
// that Redis and S3 answer, then starts its part and stops it on a signal.
import { loadConfig, redisTarget, type Config } from '../../core/config.ts';
import { createLogger, type Logger } from '../../core/log.ts';
import { onStop } from './common.ts';
import { createRedis } from '../../core/redis.ts';
import { describeRedis, type RedisTarget } from '../../core/redis-target.ts';
import { statusOf, storeFromConfig, type ObjectStore } from '../../core/s3.ts';
import { startGateway } from '../../gateway/server.ts';
import { NodeAgent } from '../../scheduler/agent.ts';
import { CliError } from '../errors.ts';
import { agentOptions, gatewayOptions } from '../../platform/embedded.ts';

/** Redis answers within 5 s, or a message that says where it was looked for (not a silent retry loop). */
async function reachRedis(target: RedisTarget): Promise<void> {
  const probe = createRedis(target, { lazyConnect: true, connectTimeout: 5_000, maxRetriesPerRequest: 0, retryStrategy: () => null, sentinelRetryStrategy: () => null, enableOfflineQueue: false });
  let cause: Error | undefined;
  probe.on('error', (err: Error) => (cause ??= err));
  try {
    await probe.connect();
    await probe.ping();
  } catch (err) {
    throw new CliError(`cannot reach Redis at ${describeRedis(target)} (${target.sentinel ? 'EMBERS_REDIS_SENTINELS' : 'EMBERS_REDIS_URL'}): ${(cause ?? (err as Error)).message || 'no answer'}; is it running, and reachable from this machine?`, 2);
  } finally {
    probe.disconnect();
  }
}

/**
 * The bucket can be used, or a message naming the settings to check. A gateway writes to it and
 * makes it if missing. An agent only reads models and bundles: it reads an object that is not
 * there, and "no such key" or "access denied" (credentials that may read objects but not list the
 * bucket get that for a missing key) pass, while a wrong key or signature, or no answer, do not;
 * a bucket not made yet is only a warning (the first gateway makes it).
 */
async function reachS3(config: Config, store: ObjectStore, use: 'write' | 'read'): Promise<void> {
  const where = config.EMBERS_S3_ENDPOINT ? `S3 at ${config.EMBERS_S3_ENDPOINT} (EMBERS_S3_ENDPOINT)` : 'AWS S3 (no EMBERS_S3_ENDPOINT set)';
  try {
    if (use === 'write') await store.ensureBucket();
    else await store.get(`${PROBE_KEY}/${Date.now()}`);
  } catch (err) {
    const code = (err as Error).name;
    if (use === 'read' && (code === 'NoSuchKey' || code === 'AccessDenied')) return;
    if (use === 'read' && code === 'NoSuchBucket') {
      process.stderr.write(`embers: bucket ${store.bucket} does not exist yet on ${where}; the first gateway to start makes it\n`);
      return;
    }
    const why = statusOf(err) === 404 ? 'no such bucket' : `${code === 'Error' ? '' : `${code}: `}${(err as Error).message || 'no answer'}`;
    throw new CliError(`cannot use bucket ${store.bucket} on ${where}: ${why}; check EMBERS_S3_ENDPOINT, EMBERS_S3_BUCKET and the AWS credentials`, 2);
  }
}

/** `embers agent`'s /metrics port when EMBERS_METRICS_PORT is unset (OpenTelemetry's Prometheus exporter's). */
const DEFAULT_AGENT_METRICS_PORT = 9464;

/** What an agent reads to check its S3 settings: a key that never exists. */
const PROBE_KEY = 'embers-probe/none';

function shared(): { config: Config; log: Logger; redisTarget: RedisTarget } {
  const config = loadConfig();
  const target = redisTarget(config);
  if (!config.EMBERS_API_KEY && process.argv.includes('gateway')) throw new CliError('set EMBERS_API_KEY for a standalone gateway', 2);
  return { config, log: createLogger('embers', config.EMBERS_LOG_LEVEL), redisTarget: target };
}

export async function runGateway(): Promise<void> {
  const { config, log, redisTarget } = shared();
  const store = storeFromConfig(config);
  await reachRedis(redisTarget);
  await reachS3(config, store, 'write');
  const gw = await startGateway(gatewayOptions(config, { redisTarget, store, apiKey: config.EMBERS_API_KEY!, log }));
  process.stdout.write(`gateway ${gw.id} listening on ${gw.url} (Redis: ${describeRedis(redisTarget)})\n`);
  onStop(log, () => gw.close());
}

export async function runAgent(): Promise<void> {
  const { config, log, redisTarget } = shared();
  const store = storeFromConfig(config);
  await reachRedis(redisTarget);
  await reachS3(config, store, 'read');
  const agent = new NodeAgent(agentOptions(config, { redisTarget, store, s3Endpoint: config.EMBERS_S3_ENDPOINT, log, metricsPort: DEFAULT_AGENT_METRICS_PORT }));
  await agent.start();
  process.stdout.write(`agent ${agent.id} running (Redis: ${describeRedis(redisTarget)}, cache ${config.dataDir}/cache${agent.metricsUrl ? `, metrics ${agent.metricsUrl}` : ''})\n`);
  onStop(log, () => agent.close());
}
