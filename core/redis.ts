import { createHash } from 'node:crypto';
import { Redis, type RedisOptions } from 'ioredis';

/** BullMQ needs maxRetriesPerRequest null on blocking connections; we use it everywhere. */
export function createRedis(url: string, options: RedisOptions = {}): Redis {
  const client = new Redis(url, { maxRetriesPerRequest: null, enableReadyCheck: true, lazyConnect: false, ...options });
  // Connection errors are retried by ioredis and surface as failed commands where they matter;
  // without a listener ioredis prints each one to stderr as "Unhandled error event".
  client.on('error', () => {});
  return client;
}

/**
 * Runs a Lua script by its SHA1 (EVALSHA), loading it with EVAL only when Redis does not have it
 * yet (first call, or after a restart): the script text is not sent on every request.
 */
export async function evalScript(redis: Redis, script: string, numKeys: number, ...args: (string | number)[]): Promise<unknown> {
  let sha = shas.get(script);
  if (!sha) shas.set(script, (sha = createHash('sha1').update(script).digest('hex')));
  try {
    return await redis.evalsha(sha, numKeys, ...args);
  } catch (err) {
    if (!String((err as Error).message).startsWith('NOSCRIPT')) throw err;
    return redis.eval(script, numKeys, ...args);
  }
}

const shas = new Map<string, string>();

export type { Redis };
