import { Redis, type RedisOptions } from 'ioredis';

/** BullMQ needs maxRetriesPerRequest null on blocking connections; we use it everywhere. */
export function createRedis(url: string, options: RedisOptions = {}): Redis {
  return new Redis(url, { maxRetriesPerRequest: null, enableReadyCheck: true, lazyConnect: false, ...options });
}

export type { Redis };
