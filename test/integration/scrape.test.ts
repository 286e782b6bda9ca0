// What a gateway's /metrics reads of the platform's state in Redis (gateway/scrape.ts, its Lua),
// on a real redis-server: requests waiting and the oldest of them, batch work outstanding and
// since when none finished, replicas by state; and embers_redis_up 0 once Redis is gone.
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { BatchStore } from '../../core/batches.ts';
import { keys, liveStream } from '../../core/keys.ts';
import { ensureLiveGroup, LIVE_GROUP } from '../../core/live-queue.ts';
import { createLogger } from '../../core/log.ts';
import { createRedis, type Redis } from '../../core/redis.ts';
import { createMetrics } from '../../gateway/metrics.ts';
import { refreshClusterGauges } from '../../gateway/scrape.ts';
import { startLocalRedis, type LocalRedis } from '../../platform/local-redis.ts';

let dir: string;
let server: LocalRedis;
let redis: Redis;

before(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'embers-scrape-'));
  server = await startLocalRedis(dir, { persist: false });
  // As the gateway's: commands fail at once while Redis is unreachable.
  redis = createRedis(server.url, { enableOfflineQueue: false, maxRetriesPerRequest: 1 });
  await new Promise((resolve) => redis.once('ready', resolve));
});
after(async () => {
  redis?.disconnect();
  await server?.stop();
  await rm(dir, { recursive: true, force: true });
});

async function scrape(): Promise<Map<string, number>> {
  const metrics = createMetrics();
  await refreshClusterGauges(redis, metrics, createLogger('test', 'silent'));
  const text = await metrics.registry.metrics();
  return new Map([...text.matchAll(/^(embers_(?:redis_up|queue_waiting|queue_oldest|batch_|replicas)\S*) (\S+)$/gm)].map((m) => [m[1], Number(m[2])]));
}

describe('gateway gauges read from Redis at scrape time', () => {
  it('counts what waits untaken and how long the oldest has, batch lines left and time since one finished, replicas by state', async () => {
    await redis.sadd(keys.functionIndex, 'busy', 'idle');
    // Three queued 100 s, 5 s and 1 s ago, the first taken by a replica (pending): two wait, the oldest for 5 s.
    await ensureLiveGroup(redis, 'busy');
    for (const ago of [100_000, 5_000, 1_000]) await redis.xadd(liveStream('busy'), `${Date.now() - ago}-0`, 'ago', String(ago));
    await redis.xreadgroup('GROUP', LIVE_GROUP, 'r1', 'COUNT', 1, 'STREAMS', liveStream('busy'), '>');
    await redis.sadd(keys.replicas('busy'), 'r1', 'r2', 'gone');
    await redis.set(keys.replica('r1'), JSON.stringify({ state: 'ready' }));
    await redis.set(keys.replica('r2'), JSON.stringify({ state: 'starting' }));
    // A batch of 5 lines in progress, one done; one of 'idle' with none done, started a minute ago.
    const batches = new BatchStore(redis);
    for (const [id, fn] of [['b1', 'busy'], ['b2', 'idle']]) await batches.create({ id, fn, tenant: 'default', key: 'k', inputUri: 's3://x/y' });
    await batches.transition('b1', ['validating'], { status: 'in_progress', total: 5, inProgressAt: new Date().toISOString() });
    await batches.transition('b2', ['validating'], { status: 'in_progress', total: 2, inProgressAt: new Date(Date.now() - 60_000).toISOString() });
    assert.equal(await batches.lineDone('b1', 0, true, '{}'), 1);
    assert.ok(Number(await redis.hget(keys.batch('b1'), 'progressAt')) > 0, 'a finished line records when');

    const m = await scrape();
    assert.equal(m.get('embers_redis_up'), 1);
    assert.equal(m.get('embers_queue_waiting_requests{function="busy"}'), 2);
    const oldest = m.get('embers_queue_oldest_waiting_seconds{function="busy"}')!;
    assert.ok(oldest >= 5 && oldest < 100, `the oldest untaken entry is the second one queued: ${oldest} s`);
    assert.equal(m.get('embers_queue_waiting_requests{function="idle"}'), 0);
    assert.equal(m.get('embers_queue_oldest_waiting_seconds{function="idle"}'), 0);
    assert.equal(m.get('embers_replicas{function="busy",state="ready"}'), 1);
    assert.equal(m.get('embers_replicas{function="busy",state="starting"}'), 1);
    assert.equal(m.get('embers_replicas{function="idle",state="ready"}'), 0);
    assert.equal(m.get('embers_batch_lines_outstanding{function="busy"}'), 4);
    assert.equal(m.get('embers_batch_lines_outstanding{function="idle"}'), 2);
    assert.ok(m.get('embers_batch_seconds_since_progress{function="idle"}')! >= 60 - 1, 'since it started, no line done');
  });

  it('reports embers_redis_up 0, and none of the gauges it reads there, while Redis is gone', async () => {
    await server.stop();
    const m = await scrape();
    assert.deepEqual([...m], [['embers_redis_up', 0]]);
  });
});
