// A platform killed outright (SIGKILL: no replica removes its user-code process's cgroup) leaves
// empty cgroups under embers/; the next node agent on the machine removes them as it starts.
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import { createInterface } from 'node:readline';
import { after, describe, it } from 'node:test';
import { cgroupsUnder, SWEEP_MIN_AGE_MS } from '../../runtime/replica/cgroup-sweep.ts';
import { embersCgroupParents, probeSandbox } from '../../runtime/replica/sandbox.ts';
import { alive, eventually, ROOT, startTestPlatform, type TestPlatform } from '../helpers/platform.ts';

const support = probeSandbox();
const skip = support.cgroup && support.isolates ? false : `this host cannot give user code cgroups in a sandbox: ${support.missing.join('; ')}`;

/** A whole platform in a process group of its own: it runs echo once, then says which data dir it uses. */
const PLATFORM = `
import { shipped, startTestPlatform } from './test/helpers/platform.ts';
const p = await startTestPlatform();
await p.deploy(shipped('echo.ts'));
const res = await p.fetch('/v1/run/echo', { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"n":1}' });
console.log(JSON.stringify({ ran: res.status, dataDir: p.dataDir }));
`;

let crashed: ChildProcess | undefined;
let p: TestPlatform | undefined;
after(async () => {
  if (crashed?.pid && alive(crashed.pid)) process.kill(-crashed.pid, 'SIGKILL');
  await p?.close();
});

/** The pids in process group `pgid`. */
function groupMembers(pgid: number): Set<number> {
  const pids = new Set<number>();
  for (const pid of readdirSync('/proc').filter((d) => /^\d+$/.test(d))) {
    try {
      // The fields after the command's name (in parentheses): state, ppid, pgrp.
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      if (Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[2]) === pgid) pids.add(Number(pid));
    } catch {
      // Gone meanwhile.
    }
  }
  return pids;
}

describe('cgroups left by a killed platform', { skip }, () => {
  it('are removed by the next node agent', async () => {
    crashed = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', PLATFORM], { cwd: ROOT, detached: true, stdio: ['ignore', 'pipe', 'inherit'] });
    const line = await new Promise<string>((resolve, reject) => {
      // (Its log lines, and its replicas', come first.)
      createInterface({ input: crashed!.stdout! }).on('line', (l) => l.startsWith('{"ran"') && resolve(l));
      crashed!.once('exit', (code) => reject(new Error(`the platform exited (${code})`)));
    });
    const { ran, dataDir } = JSON.parse(line) as { ran: number; dataDir: string };
    assert.equal(ran, 200);
    // Its replicas (standby included) share its process group; each user-code cgroup is named after its replica's pid.
    const replicas = groupMembers(crashed.pid!);
    const parents = embersCgroupParents(support.cgroup!);
    const ours = () => parents.flatMap((parent) => cgroupsUnder(parent).filter((g) => replicas.has(Number(g.name.split('-')[1]))).map((g) => ({ ...g, parent })));
    assert.ok(ours().some((g) => g.hasProcesses), 'no user-code process in a cgroup of its own');

    process.kill(-crashed.pid!, 'SIGKILL');
    // bwrap goes with the replica (--die-with-parent), and its processes with it.
    const left = await eventually(async () => {
      const groups = ours();
      return groups.length && groups.every((g) => !g.hasProcesses) ? groups : null;
    }, 'the killed user-code processes to leave their cgroups', 10_000);
    // Old enough for the sweep (a fresh empty group may be about to get its process).
    const youngest = Math.min(...left.map((g) => g.ageMs));
    await new Promise((r) => setTimeout(r, Math.max(0, SWEEP_MIN_AGE_MS - youngest + 500)));

    p = await startTestPlatform();
    await eventually(async () => ours().length === 0, 'the next agent to remove the empty cgroups', 10_000);
    await rm(dataDir, { recursive: true, force: true });
  });
});
