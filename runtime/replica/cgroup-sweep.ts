// Removes the cgroups user-code processes leave under embers/ when their replica dies without
// removing them (the node was SIGKILLed, or the machine's agent crashed): the node agent sweeps
// at start and every so often.
import { readdirSync, readFileSync, rmdirSync, statSync } from 'node:fs';
import path from 'node:path';
import { embersCgroupParents } from './sandbox.ts';

/** How old an empty cgroup must be before it is swept: far longer than a replica takes from making one to starting its process in it. */
export const SWEEP_MIN_AGE_MS = 30_000;

export interface SeenCgroup {
  /** Its folder's name: `uc-<replica pid>-<time>` (runtime/replica/main.ts). */
  name: string;
  hasProcesses: boolean;
  ageMs: number;
}

/**
 * Which cgroups to remove: a user-code process's that holds no process, whose replica is not
 * running (a live one removes its own, and may be about to start its process in it), and that
 * is older than `minAgeMs` (in case that replica is another node's, whose pids mean nothing here).
 */
export function leftoverCgroups(groups: SeenCgroup[], running: (pid: number) => boolean, minAgeMs = SWEEP_MIN_AGE_MS): string[] {
  return groups
    .filter((g) => {
      const replica = /^uc-(\d+)-/.exec(g.name);
      return !!replica && !g.hasProcesses && g.ageMs >= minAgeMs && !running(Number(replica[1]));
    })
    .map((g) => g.name);
}

/** Removes the leftover cgroups of `kind`'s hierarchies (each v1 one has its own folder per group); returns how many folders went. */
export function sweepCgroups(kind: 'v1' | 'v2', now = Date.now()): number {
  let removed = 0;
  for (const parent of embersCgroupParents(kind)) {
    for (const name of leftoverCgroups(cgroupsUnder(parent, now), running)) {
      try {
        rmdirSync(path.join(parent, name));
        removed++;
      } catch {
        // A process joined it after all, or another agent swept it first.
      }
    }
  }
  return removed;
}

/** The cgroups under `parent` as they are now. */
export function cgroupsUnder(parent: string, now = Date.now()): SeenCgroup[] {
  let names: string[];
  try {
    names = readdirSync(parent, { withFileTypes: true }).filter((d) => d.isDirectory()).map((d) => d.name);
  } catch {
    return [];
  }
  const groups: SeenCgroup[] = [];
  for (const name of names) {
    try {
      const dir = path.join(parent, name);
      const hasProcesses = readFileSync(path.join(dir, 'cgroup.procs'), 'utf8').trim() !== '';
      groups.push({ name, hasProcesses, ageMs: now - statSync(dir).mtimeMs });
    } catch {
      // Removed meanwhile.
    }
  }
  return groups;
}

/** Whether a process with this pid exists here (signal 0; EPERM: it does, as another user's). */
function running(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}
