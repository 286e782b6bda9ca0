// The embedded redis-server of `embers dev` and the tests: stopped by its owner, and never left
// behind when the owner dies without running its exit handlers.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { after, describe, it } from 'node:test';
import { Hono } from 'hono';
import { ensureLiveGroup, finishLiveEntries, LiveQueue, liveStream, readLiveEntries } from '../../core/live-queue.ts';
import { usageKeys, type UsageRecord } from '../../core/usage.ts';
import { tenantKeys } from '../../core/tenants.ts';
import { createLogger } from '../../core/log.ts';
import { createRedis } from '../../core/redis.ts';
import { onError } from '../../gateway/errors.ts';
import { DataDirInUseError, startLocalRedis } from '../../infra/local/redis.ts';
import { ROOT, eventually } from '../helpers/platform.ts';

const dirs: string[] = [];
after(async () => {
  for (const d of dirs) await rm(d, { recursive: true, force: true });
});

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

async function serverPid(url: string): Promise<number> {
  const client = createRedis(url);
  try {
    return Number(/process_id:(\d+)/.exec(await client.info('server'))![1]);
  } finally {
    client.disconnect();
  }
}

describe('embedded redis-server', () => {
  it('stops when its owner stops it', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'embers-local-redis-'));
    dirs.push(dir);
    const redis = await startLocalRedis(dir);
    const pid = await serverPid(redis.url);
    await redis.stop();
    assert.ok(!alive(pid));
  });

  it('refuses a data dir whose redis-server still runs, and takes it once that one stopped', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'embers-local-redis-'));
    dirs.push(dir);
    const first = await startLocalRedis(dir, { persist: true });
    try {
      await assert.rejects(startLocalRedis(dir, { persist: true }), (err: Error) => err instanceof DataDirInUseError && err.message.includes(`answers on port ${first.port}`));
    } finally {
      await first.stop();
    }
    const second = await startLocalRedis(dir, { persist: true });
    await second.stop();
    // The port it left is now held by something that takes connections and never answers.
    const mute = net.createServer(() => {});
    await new Promise<void>((resolve) => mute.listen(0, '127.0.0.1', resolve));
    try {
      await writeFile(path.join(dir, 'port'), `${(mute.address() as net.AddressInfo).port}\n`);
      await assert.rejects(startLocalRedis(dir, { persist: true }), (err: Error) => err instanceof DataDirInUseError && /did not answer in 2 s; if no Embers runs on this data dir, delete that file/.test(err.message));
    } finally {
      mute.close();
    }
  });

  it('stops when its owner is killed outright (SIGKILL runs no exit handler)', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'embers-local-redis-'));
    dirs.push(dir);
    const owner = spawn(process.execPath, ['--import', 'tsx', '-e', `import('./infra/local/redis.ts').then((m) => m.startLocalRedis(${JSON.stringify(dir)})).then((r) => console.log('url', r.url))`], { cwd: ROOT, stdio: ['ignore', 'pipe', 'inherit'] });
    let pid: number | undefined;
    try {
      const url = await new Promise<string>((resolve, reject) => {
        owner.stdout!.on('data', (d: Buffer) => {
          const m = /url (\S+)/.exec(d.toString());
          if (m) resolve(m[1]);
        });
        owner.once('exit', (code) => reject(new Error(`owner exited (${code}) before its redis-server was up`)));
      });
      pid = await serverPid(url);
      owner.kill('SIGKILL');
      await eventually(async () => !alive(pid!), 'the orphaned redis-server to stop', 10_000);
    } finally {
      owner.kill('SIGKILL');
      if (pid !== undefined && alive(pid)) process.kill(pid, 'SIGKILL');
    }
  });
});

describe('a full Redis', () => {
  it('runs with a memory limit, and a write it refuses there is a 503 the caller can act on', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'embers-full-'));
    dirs.push(dir);
    const server = await startLocalRedis(dir, { maxMemoryBytes: 4 * 1024 * 1024 });
    const redis = createRedis(server.url);
    try {
      assert.equal((await redis.config('GET', 'maxmemory'))[1], String(4 * 1024 * 1024));
      assert.equal((await redis.config('GET', 'maxmemory-policy'))[1], 'noeviction');
      // A key to queue with, the stream and its group made (as after a first request), then fill
      // Redis past its limit and queue a request as the gateway does (a keyed enqueue: a script).
      await redis.hset(tenantKeys.keysByHash, 'k', JSON.stringify({ id: 'k1', tenant: 'default', scopes: ['run'] }));
      await ensureLiveGroup(redis, 'echo');
      // A request already queued and taken by a replica before Redis filled up.
      await new LiveQueue(redis).add('echo', { rid: 'r-before', gw: 'gw', input: {}, enq: Date.now() }, { keyHash: 'k' });
      const [[held]] = await readLiveEntries(redis, 'echo', 'replica-1', 1);
      let refused = false;
      for (let i = 0; i < 1024 && !refused; i++) refused = await redis.set(`ballast:${i}`, Buffer.alloc(16 * 1024)).then(() => false, () => true);
      assert.ok(refused, 'Redis refuses writes past its maxmemory');
      const app = new Hono();
      app.onError(onError(createLogger('test', 'silent')));
      app.post('/run', async (c) => c.json({ id: await new LiveQueue(redis).add('echo', { rid: 'r-full', gw: 'gw', input: {}, enq: Date.now() }, { keyHash: 'k', body: Buffer.alloc(1024) }) }));
      const res = await app.request('/run', { method: 'POST' });
      assert.equal(res.status, 503);
      assert.equal(res.headers.get('retry-after'), '5');
      const { error } = (await res.json()) as { error: { code: string; message: string } };
      assert.equal(error.code, 'redis_full');
      assert.match(error.message, /Redis is out of memory .*nothing was queued; retry once the queues drain/);
      assert.equal(await redis.xlen(liveStream('echo')), 1, 'nothing queued');
      // Replicas can still finish what they hold at the limit (the acknowledgement comes first in
      // the finishing script, and its metering and reply with it), which frees the room.
      const usage: UsageRecord = { id: 'u-before', tenant: 'default', key: 'k1', fn: 'echo', version: 'v1', kind: 'sync', status: 200, queueMs: 1, computeMs: 1, inferMs: 0, coldMs: 0, bytesIn: 2, bytesOut: 2, at: new Date().toISOString() };
      assert.deepEqual(await finishLiveEntries(redis, 'echo', [{ id: held, outcome: { usage, reply: { channel: 'embers:test:full', message: 'answer' } } }]), [true]);
      assert.equal(await redis.xlen(liveStream('echo')), 0, 'finished at the limit, and deleted');
      assert.equal((await redis.xrange(usageKeys.records, '-', '+')).length, 1, 'and metered');
    } finally {
      redis.disconnect();
      await server.stop();
    }
  });
});
