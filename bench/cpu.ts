// Where the CPU goes during a point: CPU time of this process (the load generator) and of
// every process in the servers' process groups, by role, from /proc (Linux; empty elsewhere).
import { readFileSync, readdirSync } from 'node:fs';

/** USER_HZ: the unit of utime/stime in /proc/<pid>/stat (100 on every mainstream Linux). */
const TICKS_PER_S = 100;

export type CpuSample = Map<number, { role: string; ticks: number }>;

function role(pid: number, cmdline: string): string {
  if (pid === process.pid) return 'loadgen';
  if (cmdline.includes('redis-server')) return 'redis';
  // From TypeScript source, or the prebuilt runtime the agent writes to <data dir>/cache/runtime/<hash>/main.mjs.
  if (cmdline.includes('runtime/replica/main.ts') || /cache\/runtime\/[^/ ]+\/main\.mjs/.test(cmdline)) return 'replicas';
  // The sandboxed user-code process: from source, or the prebuilt runtime bound inside the sandbox.
  if (cmdline.includes('runtime/user-code/main.ts') || cmdline.includes('user-main.mjs')) return 'user code';
  if (cmdline.includes('cli/bin.mjs')) return 'gateway+agent';
  if (cmdline.includes('naive-server')) return 'naive';
  const bare = /bare-path\.ts (gateway|worker|handler)/.exec(cmdline);
  if (bare) return `bare ${bare[1]}`;
  return 'other';
}

/**
 * CPU ticks of this process, of the processes in the given process groups, and of the groups
 * their children start (the embedded redis-server runs in a group of its own).
 */
export function sampleCpu(groups: number[]): CpuSample {
  const out: CpuSample = new Map();
  let pids: string[];
  try {
    pids = readdirSync('/proc').filter((d) => /^\d+$/.test(d));
  } catch {
    return out;
  }
  const procs: { pid: number; ppid: number; pgrp: number; ticks: number }[] = [];
  for (const d of pids) {
    try {
      const stat = readFileSync(`/proc/${d}/stat`, 'utf8');
      // Fields after the parenthesised command: state is field 3, ppid 4, pgrp 5, utime 14, stime 15.
      const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      procs.push({ pid: Number(d), ppid: Number(f[1]), pgrp: Number(f[2]), ticks: Number(f[11]) + Number(f[12]) });
    } catch {
      // The process ended while we looked.
    }
  }
  // The members' descendants, whatever group or session they run in: the embedded
  // redis-server's watchdog with redis-server under it, a replica's sandboxed user-code process.
  const taken = new Set([process.pid, ...procs.filter((p) => groups.includes(p.pgrp)).map((p) => p.pid)]);
  for (let grew = true; grew; ) {
    grew = false;
    for (const p of procs) if (!taken.has(p.pid) && taken.has(p.ppid) && p.ppid !== process.pid) grew = taken.add(p.pid) !== undefined;
  }
  for (const p of procs) {
    if (!taken.has(p.pid)) continue;
    try {
      const cmdline = readFileSync(`/proc/${p.pid}/cmdline`, 'utf8').replace(/\0/g, ' ');
      out.set(p.pid, { role: role(p.pid, cmdline), ticks: p.ticks });
    } catch {
      // Ended.
    }
  }
  return out;
}

/** Cores busy per role between two samples taken `seconds` apart (processes gone by `after` are not counted). */
export function coresByRole(before: CpuSample, after: CpuSample, seconds: number): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [pid, a] of after) {
    const ticks = a.ticks - (before.get(pid)?.ticks ?? 0);
    out[a.role] = (out[a.role] ?? 0) + ticks / TICKS_PER_S / seconds;
  }
  return out;
}
