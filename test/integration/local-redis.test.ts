// The embedded redis-server of `embers dev`: one per data dir, and none left behind.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, describe, it } from 'node:test';
import { DataDirInUseError, startLocalRedis } from '../../infra/local/redis.ts';
import { ROOT } from '../helpers/platform.ts';

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

describe('embedded redis-server', () => {
  it('stops one left behind on its data dir by a killed Embers, and refuses a dir another running Embers uses', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'embers-local-redis-'));
    dirs.push(dir);
    // An Embers killed outright (SIGKILL): its redis-server runs on, orphaned.
    const owner = spawn(process.execPath, ['--import', 'tsx', '-e', `import('./infra/local/redis.ts').then((m) => m.startLocalRedis(${JSON.stringify(dir)})).then(() => console.log('up'))`], { cwd: ROOT, stdio: ['ignore', 'pipe', 'inherit'] });
    await new Promise<void>((resolve, reject) => {
      owner.stdout!.on('data', (d: Buffer) => d.toString().includes('up') && resolve());
      owner.once('exit', (code) => reject(new Error(`child exited (${code}) before its redis-server was up`)));
    });
    const orphan = Number((await readFile(path.join(dir, 'redis.pid'), 'utf8')).trim());
    assert.ok(alive(orphan));
    owner.kill('SIGKILL');
    await new Promise((r) => owner.once('exit', r));
    assert.ok(alive(orphan), 'nothing stops it when its parent is killed');

    const redis = await startLocalRedis(dir);
    try {
      assert.ok(!alive(orphan), 'the next start stopped the one left behind');
      // This process is a running Embers on that dir now: a second start must not take it over.
      await assert.rejects(startLocalRedis(dir), (err: Error) => err instanceof DataDirInUseError && /another Embers \(pid \d+\) runs a redis-server/.test(err.message));
    } finally {
      await redis.stop();
    }
  });
});
