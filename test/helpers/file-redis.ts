// A redis-server of a test file's own: started in a temporary folder before the file's tests,
// stopped and removed after them.
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before } from 'node:test';
import { createRedis, type Redis } from '../../core/redis.ts';
import { startLocalRedis, type LocalRedis } from '../../platform/local-redis.ts';

/** Registers the file's before/after hooks; `redis()` is a client of it once the tests run. */
export function fileRedis(name: string): { redis: () => Redis } {
  let server: LocalRedis | undefined;
  let dir: string | undefined;
  let client: Redis | undefined;
  before(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), `embers-${name}-`));
    server = await startLocalRedis(dir);
    client = createRedis(server.url);
  });
  after(async () => {
    client?.disconnect();
    await server?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });
  return {
    redis: () => {
      if (!client) throw new Error('fileRedis: the client exists once the tests run');
      return client;
    },
  };
}
