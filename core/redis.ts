import { Redis, type RedisOptions } from 'ioredis';

/** BullMQ needs maxRetriesPerRequest null on blocking connections; we use it everywhere. */
export function createRedis(url: string, options: RedisOptions = {}): Redis {
  const client = new Redis(url, { maxRetriesPerRequest: null, enableReadyCheck: true, lazyConnect: false, ...options });
  // Connection errors are retried by ioredis and surface as failed commands where they matter;
  // without a listener ioredis prints each one to stderr as "Unhandled error event".
  client.on('error', () => {});
  return client;
}

export type { Redis };
