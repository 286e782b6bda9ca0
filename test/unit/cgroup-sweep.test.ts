// Which leftover cgroups of user-code processes the node agent removes: pure logic.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { leftoverCgroups, SWEEP_MIN_AGE_MS } from '../../runtime/replica/cgroup-sweep.ts';

describe('leftoverCgroups', () => {
  const old = SWEEP_MIN_AGE_MS + 1;
  const running = (pids: number[]) => (pid: number) => pids.includes(pid);

  it('removes an empty, old group whose replica is gone', () => {
    assert.deepEqual(leftoverCgroups([{ name: 'uc-123-m1', hasProcesses: false, ageMs: old }], running([])), ['uc-123-m1']);
  });

  it('keeps a group with a process, a fresh one, and one whose replica still runs', () => {
    const groups = [
      { name: 'uc-1-a', hasProcesses: true, ageMs: old },
      // Just made: its replica (or another node's) is about to start its process in it.
      { name: 'uc-2-b', hasProcesses: false, ageMs: SWEEP_MIN_AGE_MS - 1 },
      // Its replica removes it itself, after reading it for an OOM kill.
      { name: 'uc-3-c', hasProcesses: false, ageMs: old },
    ];
    assert.deepEqual(leftoverCgroups(groups, running([3])), []);
  });

  it('leaves groups it did not make alone', () => {
    assert.deepEqual(leftoverCgroups([{ name: 'system.slice', hasProcesses: false, ageMs: old }, { name: 'uc-x-1', hasProcesses: false, ageMs: old }], running([])), []);
  });

  it('takes the age margin it is given', () => {
    assert.deepEqual(leftoverCgroups([{ name: 'uc-9-z', hasProcesses: false, ageMs: 10 }], running([]), 5), ['uc-9-z']);
  });
});
