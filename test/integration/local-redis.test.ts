// The embedded redis-server of `embers dev` and the tests: stopped by its owner, and never left
// behind when the owner dies without running its exit handlers.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { after, describe, it } from 'node:test';
import { createRedis } from '../../core/redis.ts';
import { freePort } from '../../platform/ports.ts';
import { DataDirInUseError, startLocalRedis } from '../../platform/local-redis.ts';
import { ROOT, alive, eventually } from '../helpers/platform.ts';

const dirs: string[] = [];
after(async () => {
  for (const d of dirs) await rm(d, { recursive: true, force: true });
});

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

  it('a port it chose that something else took before redis-server bound it is retried on another', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'embers-local-redis-'));
    dirs.push(dir);
    const squatter = net.createServer();
    await new Promise<void>((r) => squatter.listen(0, '127.0.0.1', r));
    const taken = (squatter.address() as net.AddressInfo).port;
    const chosen: number[] = [];
    try {
      // First the taken port, then a free one.
      const choosePort = async () => {
        const port = chosen.length ? await freePort() : taken;
        chosen.push(port);
        return port;
      };
      const redis = await startLocalRedis(dir, { choosePort });
      try {
        assert.equal(chosen.length, 2);
        assert.equal(chosen[0], taken);
        assert.equal(redis.port, chosen[1]);
        assert.notEqual(redis.port, taken);
        assert.ok((await serverPid(redis.url)) > 0);
      } finally {
        await redis.stop();
      }
      // A port given by the caller is not swapped for another.
      await assert.rejects(startLocalRedis(dir, { port: taken }), /redis-server exited at start/);
    } finally {
      squatter.close();
    }
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
    const owner = spawn(process.execPath, ['--import', 'tsx', '-e', `import('./platform/local-redis.ts').then((m) => m.startLocalRedis(${JSON.stringify(dir)})).then((r) => console.log('url', r.url))`], { cwd: ROOT, stdio: ['ignore', 'pipe', 'inherit'] });
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
