// A process whose terminal goes away while it logs: every later write fails with EIO, and the
// logger must neither crash it (pino-pretty's thread dies, sonic-boom emits the error) nor hold
// its exit for ever (a flush at exit retrying what was buffered).
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, describe, it } from 'node:test';
import { ROOT, alive, eventually } from '../helpers/platform.ts';

const hasScript = existsSync('/usr/bin/script') || existsSync('/bin/script');
const dirs: string[] = [];
after(async () => {
  for (const d of dirs) await rm(d, { recursive: true, force: true });
});

describe('logging to a terminal that hangs up', { skip: !hasScript && 'script(1) (util-linux) is not installed' }, () => {
  for (const pretty of ['true', 'false']) {
    it(`stops in its own time, ${pretty === 'true' ? 'pretty (through pino-pretty\'s thread)' : 'as JSON'}`, { timeout: 30_000 }, async () => {
      const dir = await mkdtemp(path.join(os.tmpdir(), 'embers-hangup-'));
      dirs.push(dir);
      const marker = path.join(dir, 'stopped');
      const pidFile = path.join(dir, 'pid');
      const cmd = `echo $$ > '${pidFile}'; exec '${process.execPath}' --import tsx '${path.join(ROOT, 'test/fixtures/hangup-logger.ts')}' '${marker}'`;
      const term = spawn('script', ['-qfec', cmd, '/dev/null'], { cwd: ROOT, env: { ...process.env, EMBERS_LOG_PRETTY: pretty }, detached: true, stdio: ['pipe', 'pipe', 'pipe'] });
      let out = '';
      term.stdout!.on('data', (d: Buffer) => (out += d));
      await eventually(async () => out.includes('ready'), 'the logger to start', 15_000);
      const pid = Number(await readFile(pidFile, 'utf8'));
      // The terminal closes: the kernel sends SIGHUP, and writes to it fail from now on.
      process.kill(term.pid!, 'SIGKILL');
      try {
        await eventually(async () => !alive(pid), 'the process to exit after its terminal closed', 10_000);
        assert.equal(await readFile(marker, 'utf8'), 'stopped', 'it ran its own stop to the end');
      } finally {
        if (alive(pid)) process.kill(pid, 'SIGKILL');
      }
    });
  }
});
