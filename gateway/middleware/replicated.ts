import type { MiddlewareHandler } from 'hono';
import type { Redis } from 'ioredis';
import { replicated, replicationOf } from '../../core/redis.ts';
import type { RedisTarget } from '../../core/redis-target.ts';
import type { GatewayEnv } from '../deps.ts';
import { ApiError } from '../errors.ts';

const READS = new Set(['GET', 'HEAD', 'OPTIONS']);

/**
 * What a write answered says is kept (an async run or batch accepted, a deploy, a key created)
 * survives a Redis failover: before such an answer leaves, `target.ackReplicas` replicas hold
 * every write the gateway's connection sent so far (Redis WAIT). A sync run's 200 has nothing
 * left to keep and is not held back. Where none confirm in time the answer is a 503 that says the
 * work may still exist, with its Location where it had one: retrying blindly could do it twice.
 * After such a shortfall, writes are refused before they are made (503 `no_replica`, safe to
 * retry) until the primary has its replicas again, instead of each waiting out the timeout.
 */
export function replicatedWrites(redis: Redis, target: RedisTarget): MiddlewareHandler<GatewayEnv> {
  let short = false;
  return async function replicatedWrite(c, next) {
    if (READS.has(c.req.method) || isSyncRun(c.req.path, c.req.header('prefer'))) return next();
    if (short) {
      const replicas = await replicationOf(redis).then((r) => r.replicas, () => 0);
      if (replicas < target.ackReplicas) {
        throw new ApiError(503, 'no_replica', `Redis's primary has ${replicas} of the ${target.ackReplicas} replica(s) accepted work must reach (EMBERS_REDIS_ACK_REPLICAS), so nothing was done: retry shortly; sync runs are served meanwhile.`);
      }
      short = false;
    }
    await next();
    const status = c.res.status;
    if (status < 200 || status >= 300) return;
    if (await replicated(redis, target).catch(() => false)) return;
    short = true;
    const location = c.res.headers.get('location');
    throw new ApiError(
      503,
      'not_replicated',
      `Redis's primary took this, but no replica confirmed it within ${target.ackTimeoutMs} ms: it is lost if Redis fails over now. ${location ? `Check ${location} before retrying` : 'Check whether it took effect before retrying'}.`,
      location ? { location } : undefined,
    );
  };
}

/** A run answered when done (sync, or an OIP infer): nothing is accepted for later. */
function isSyncRun(path: string, prefer: string | undefined): boolean {
  return path.startsWith('/v2/') || (path.startsWith('/v1/run/') && !/respond-async/i.test(prefer ?? ''));
}
