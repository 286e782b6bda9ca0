// A streamed answer's chunks on a real redis-server: numbered in order, a run taken over after a
// crash numbering on; an async job's kept within a count and a byte total; a sync caller's read
// and removed as read, so their stream's length is what is unread; readers woken by the notice
// each write publishes.
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { addChunks, KEPT_CHUNK_BYTES, KEPT_CHUNKS, readChunks } from '../../core/chunks.ts';
import { keys } from '../../core/keys.ts';
import { createRedis, type Redis } from '../../core/redis.ts';
import { ChunkReader } from '../../gateway/chunk-reader.ts';
import { ReplyHub } from '../../gateway/replies.ts';
import { startLocalRedis, type LocalRedis } from '../../platform/local-redis.ts';

let server: LocalRedis;
let dir: string;
let redis: Redis;
let sub: Redis;
let hub: ReplyHub;

before(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'embers-chunks-'));
  server = await startLocalRedis(dir);
  redis = createRedis(server.url);
  sub = createRedis(server.url);
  hub = new ReplyHub(sub, 'gw-chunks');
  await hub.start();
});
after(async () => {
  sub.disconnect();
  redis.disconnect();
  await server.stop();
  await rm(dir, { recursive: true, force: true });
});

const caller = { kept: false, ttlMs: 60_000 };

describe('chunks in Redis', () => {
  it('numbers chunks 1, 2, … in order, and a second run of the request numbers on', async () => {
    assert.deepEqual(await addChunks(redis, 'r1', ['{"i":1}', '{"i":2}'], caller), { last: 2, length: 2 });
    assert.deepEqual(await addChunks(redis, 'r1', ['{"i":3}'], caller), { last: 3, length: 3 });
    assert.deepEqual(await readChunks(redis, 'r1', 1, 10), [{ seq: 2, data: '{"i":2}' }, { seq: 3, data: '{"i":3}' }]);
    const ttl = await redis.pttl(keys.chunks('r1'));
    assert.ok(ttl > 50_000 && ttl <= 60_000, `ttl ${ttl}`);
  });

  it('a sync caller\'s chunks are removed as they are read: the length is what is unread', async () => {
    await addChunks(redis, 'r2', ['1', '2', '3', '4'], caller);
    assert.deepEqual((await readChunks(redis, 'r2', 0, 2, true)).map((c) => c.seq), [1, 2]);
    // The next read removes what the last one passed on.
    assert.deepEqual((await readChunks(redis, 'r2', 2, 10, true)).map((c) => c.seq), [3, 4]);
    assert.equal(await redis.xlen(keys.chunks('r2')), 2);
    assert.deepEqual(await addChunks(redis, 'r2', ['5'], caller), { last: 5, length: 3 });
    // Never trimmed by the replica, however many: its credit is what bounds them.
    const many = Array.from({ length: 1500 }, (_, i) => String(i));
    assert.equal((await addChunks(redis, 'r2', many, caller)).length, 1503);
  });

  it('an async job keeps its latest chunks within a count and a byte total', async () => {
    const job = { kept: true, ttlMs: 60_000 };
    const small = Array.from({ length: KEPT_CHUNKS + 10 }, (_, i) => String(i + 1));
    const { last, length } = await addChunks(redis, 'job_count', small, job);
    assert.equal(last, KEPT_CHUNKS + 10);
    assert.equal(length, KEPT_CHUNKS);
    assert.equal((await readChunks(redis, 'job_count', 0, 1))[0].seq, 11, 'the oldest went first');
    const big = 'x'.repeat(60_000);
    const n = Math.ceil(KEPT_CHUNK_BYTES / big.length) + 5;
    for (let i = 0; i < n; i++) await addChunks(redis, 'job_bytes', [big], job);
    const kept = Number(await redis.get(keys.chunkBytes('job_bytes')));
    assert.ok(kept <= KEPT_CHUNK_BYTES && kept > KEPT_CHUNK_BYTES - big.length, `${kept} bytes kept`);
    assert.equal(await redis.xlen(keys.chunks('job_bytes')), kept / big.length);
  });

  it('a reader waits for the notice of a write, not for its poll', async () => {
    const reader = new ChunkReader({ redis, hub, id: 'r3', consume: true });
    await reader.open();
    assert.deepEqual(await reader.read(), []);
    const t0 = performance.now();
    setTimeout(() => void addChunks(redis, 'r3', ['{"late":true}'], caller), 50);
    await reader.wait(10_000);
    assert.ok(performance.now() - t0 < 5_000, 'woken by the notice');
    assert.deepEqual(await reader.read(), [{ seq: 1, data: '{"late":true}' }]);
    assert.equal(reader.after, 1);
    await reader.close();
    assert.equal(await redis.exists(keys.chunks('r3')), 0, 'a sync caller\'s chunks go with its reader');
    // Resuming after a Last-Event-ID.
    await addChunks(redis, 'job_r4', ['1', '2', '3'], { kept: true, ttlMs: 60_000 });
    const resumed = new ChunkReader({ redis, hub, id: 'job_r4', after: 2, consume: false });
    await resumed.open();
    assert.deepEqual((await resumed.next(10)).map((c) => c.seq), [3]);
    await resumed.close();
    assert.equal(await redis.xlen(keys.chunks('job_r4')), 3, 'a job\'s chunks stay for other readers');
  });
});
