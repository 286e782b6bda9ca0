// The user-code process's sandbox, with what Linux offers and no container runtime: bubblewrap
// (Debian's `bubblewrap`) unshares every namespace (no network but loopback, its own pids, no
// view of the host's files beyond what is bound read-only), setpriv runs it as an unprivileged
// uid of its own when the agent runs as root, prlimit bounds open files and processes, and a
// cgroup (v2, or v1's memory/pids/cpu hierarchies) bounds memory, pids and CPU share.
// bwrap over unshare(1): it builds the whole filesystem view (binds, tmpfs /tmp with a size,
// new /proc and /dev) in one unprivileged step, where unshare would need a script of mounts.
import { spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, readFileSync, rmdirSync, statSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';

/** What this host can enforce; `missing` says, for a person, what it cannot and why. */
export interface SandboxSupport {
  /** bwrap runs with every namespace unshared. */
  isolates: boolean;
  /** The user-code process gets a uid of its own (the agent runs as root). */
  ownUid: boolean;
  cgroup: 'v2' | 'v1' | null;
  /** prlimit(1) is there to set rlimits. */
  rlimits: boolean;
  /** bwrap can keep the process from making user namespaces of its own (bwrap 0.8+). */
  noNestedUserns?: boolean;
  missing: string[];
}

export interface SandboxLimits {
  memoryBytes: number;
  pids: number;
  openFiles: number;
  tmpBytes: number;
}

export interface SandboxCommand {
  command: string;
  args: string[];
  /**
   * What to write to the process's stdin, then end: bwrap's options (`--args 0`), NUL-separated.
   * Off its command line, which the sandbox can read as /proc/1/cmdline, as they name host paths.
   */
  input: Buffer;
}

export interface SandboxSpec {
  /** The node binary and its arguments (entry file included), as seen inside. */
  node: string[];
  /** host path → path inside, read-only (files or folders). */
  mounts: { from: string; to: string }[];
  /** Device nodes bound inside (GPUs). */
  devices: string[];
  limits: SandboxLimits;
  /** Run as this uid/gid (only when the caller is root). */
  uid?: number;
  /** cgroup.procs files the process joins before it starts. */
  cgroupProcs: string[];
  /** Whether to wrap in bwrap at all (false: limits only, on a host that cannot isolate). */
  isolate: boolean;
  /** Whether to set rlimits with prlimit(1). @default true */
  rlimits?: boolean;
  /** Keep the process from making user namespaces of its own (less of the kernel within its reach). */
  noNestedUserns?: boolean;
}

/** The command line that starts the user-code process as `spec` says. Pure: tested as such. */
export function sandboxCommand(spec: SandboxSpec): SandboxCommand {
  const options = [
    '--unshare-all',
    ...(spec.noNestedUserns ? ['--unshare-user', '--disable-userns'] : []),
    '--die-with-parent',
    '--new-session',
    '--ro-bind', '/usr', '/usr',
    '--symlink', 'usr/lib', '/lib',
    '--symlink', 'usr/lib64', '/lib64',
    '--symlink', 'usr/bin', '/bin',
    '--ro-bind-try', '/etc/ld.so.cache', '/etc/ld.so.cache',
    '--proc', '/proc',
    '--dev', '/dev',
    '--size', String(spec.limits.tmpBytes),
    '--tmpfs', '/tmp',
    ...spec.mounts.flatMap((m) => ['--ro-bind', m.from, m.to]),
    ...spec.devices.flatMap((d) => ['--dev-bind', d, d]),
    '--chdir', '/tmp',
  ];
  const asUser = spec.uid !== undefined ? ['setpriv', `--reuid=${spec.uid}`, `--regid=${spec.uid}`, '--clear-groups', '--inh-caps=-all', '--'] : [];
  const limits = spec.rlimits === false ? [] : ['prlimit', `--nofile=${spec.limits.openFiles}`, `--nproc=${spec.limits.pids}`, '--core=0', '--'];
  // The shell joins the cgroups first, so that everything it then execs is inside them.
  const join = 'while [ "$1" != "--" ]; do echo $$ > "$1" || exit 97; shift; done; shift; exec "$@"';
  // sh, prlimit and setpriv leave stdin to bwrap, which reads its options from it.
  const wrap = spec.isolate ? ['bwrap', '--args', '0', '--'] : [];
  const input = spec.isolate ? Buffer.from(options.map((a) => `${a}\0`).join('')) : Buffer.alloc(0);
  return { command: 'sh', args: ['-c', join, 'sh', ...spec.cgroupProcs, '--', ...limits, ...asUser, ...wrap, ...spec.node], input };
}

const CGROUP_ROOT = '/sys/fs/cgroup';
const V1_CONTROLLERS = ['memory', 'pids', 'cpu'] as const;

/** The folders that hold user-code processes' cgroups: embers/ in v2, or in each v1 hierarchy. */
export function embersCgroupParents(kind: 'v1' | 'v2'): string[] {
  return kind === 'v2' ? [path.join(CGROUP_ROOT, 'embers')] : V1_CONTROLLERS.map((c) => path.join(CGROUP_ROOT, c, 'embers'));
}

let probed: SandboxSupport | undefined;

/** Probes once what this host can enforce (bwrap with user and network namespaces, cgroups, a uid switch); `off`: nothing. */
export function probeSandbox(mode: 'auto' | 'off' = 'auto'): SandboxSupport {
  if (mode === 'off') return { isolates: false, ownUid: false, cgroup: null, rlimits: false, missing: ['sandboxing is turned off (EMBERS_SANDBOX=off)'] };
  if (probed) return probed;
  const missing: string[] = [];
  const root = process.getuid?.() === 0;
  const rlimits = spawnSync('prlimit', ['--version']).status === 0;
  if (!rlimits) missing.push('prlimit (util-linux) is not installed: no limits on open files and processes');
  const bwrapThere = spawnSync('bwrap', ['--version']).status === 0;
  let isolates = false;
  let noNestedUserns = false;
  if (!bwrapThere) missing.push('bubblewrap is not installed (Debian/Ubuntu: apt-get install bubblewrap)');
  else {
    const tryRun = (noNestedUserns: boolean) => {
      const probe = sandboxCommand({ node: ['/bin/true'], mounts: [], devices: [], limits: { memoryBytes: 0, pids: 64, openFiles: 64, tmpBytes: 1 << 20 }, uid: root ? SANDBOX_UID_BASE : undefined, cgroupProcs: [], isolate: true, rlimits, noNestedUserns });
      return spawnSync(probe.command, probe.args, { input: probe.input, encoding: 'utf8', timeout: 10_000 });
    };
    let r = tryRun(true);
    noNestedUserns = r.status === 0;
    if (!noNestedUserns) {
      r = tryRun(false);
      if (r.status === 0) missing.push('bwrap cannot disable nested user namespaces (it needs 0.8 or newer): user code may make its own');
    }
    isolates = r.status === 0;
    if (!isolates) missing.push(`bwrap cannot create user and network namespaces here (${(r.stderr || r.error?.message || `exit ${r.status}`).trim().split('\n')[0]}); inside a container, allow user namespaces (e.g. --security-opt seccomp=unconfined, kernel.unprivileged_userns_clone=1)`);
  }
  if (!root) missing.push('not running as root: user code runs as the agent\'s own uid (namespaces still hide the host\'s files and network)');
  const cgroup = probeCgroup();
  if (!cgroup) missing.push(`cgroups are not writable under ${CGROUP_ROOT}: memory, pids and CPU share are bounded by rlimits only (no memory limit)`);
  probed = { isolates, ownUid: root && isolates, cgroup, rlimits, noNestedUserns, missing };
  return probed;
}

/**
 * Makes embers/ (beside the root's other children) and its CPU weight. Where the agent itself
 * runs in the root cgroup, each of the platform's processes is weighed as a task of its own
 * against embers/ as a whole: at the default weight all user code together would get one thread's
 * share however many cores its models use, so there embers/ weighs as much as a task per core.
 * Where the agent is in a cgroup of its own (a systemd service's), embers/ keeps the default
 * weight, that of the agent's group. Its replicas' cgroups keep the default: equal shares.
 */
function probeCgroup(): SandboxSupport['cgroup'] {
  try {
    if (existsSync(path.join(CGROUP_ROOT, 'cgroup.controllers'))) {
      const dir = path.join(CGROUP_ROOT, 'embers');
      mkdirSync(dir, { recursive: true });
      // Children of embers/ may use these controllers.
      for (const c of ['memory', 'pids', 'cpu']) {
        try {
          delegate(CGROUP_ROOT, c);
          writeFileSync(path.join(dir, 'cgroup.subtree_control'), `+${c}`);
        } catch {
          // Enabled already, or not delegated: its limit is then not applied.
        }
      }
      if (inRootCgroup('')) tryWrite(path.join(dir, 'cpu.weight'), String(Math.min(10_000, 100 * os.availableParallelism())));
      return 'v2';
    }
    for (const c of V1_CONTROLLERS) mkdirSync(path.join(CGROUP_ROOT, c, 'embers'), { recursive: true });
    if (inRootCgroup('cpu')) tryWrite(path.join(CGROUP_ROOT, 'cpu', 'embers', 'cpu.shares'), String(1024 * os.availableParallelism()));
    return 'v1';
  } catch {
    return null;
  }
}

/**
 * Lets `root` hand `controller` to its children. Under cgroup v2 a cgroup other than the host's
 * root may do so only while no process sits in it: an agent in a container, at the root of its
 * cgroup namespace, sits in such a cgroup (EBUSY). The container's processes move to a leaf,
 * agent/, and the write is tried again. cgroup v1 has no such rule.
 */
function delegate(root: string, controller: string): void {
  const control = path.join(root, 'cgroup.subtree_control');
  try {
    writeFileSync(control, `+${controller}`);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EBUSY') throw err;
    const leaf = path.join(root, 'agent');
    mkdirSync(leaf, { recursive: true });
    for (const pid of readFileSync(path.join(root, 'cgroup.procs'), 'utf8').split('\n').filter(Boolean)) tryWrite(path.join(leaf, 'cgroup.procs'), pid);
    writeFileSync(control, `+${controller}`);
  }
}

/** First uid of user-code processes (one each: SANDBOX_UID_BASE + their replica's pid). */
export const SANDBOX_UID_BASE = 2_000_000;

/** A user-code process's cgroup: made before it starts, read for OOM kills, removed after it exits. */
export class SandboxCgroup {
  private constructor(
    private readonly kind: 'v1' | 'v2',
    private readonly dirs: string[],
  ) {}

  static create(kind: 'v1' | 'v2', name: string, limits: SandboxLimits): SandboxCgroup {
    if (kind === 'v2') {
      const dir = path.join(CGROUP_ROOT, 'embers', name);
      mkdirSync(dir, { recursive: true });
      tryWrite(path.join(dir, 'memory.max'), String(limits.memoryBytes));
      tryWrite(path.join(dir, 'memory.swap.max'), '0');
      tryWrite(path.join(dir, 'pids.max'), String(limits.pids));
      return new SandboxCgroup(kind, [dir]);
    }
    const dirs = V1_CONTROLLERS.map((c) => path.join(CGROUP_ROOT, c, 'embers', name));
    for (const d of dirs) mkdirSync(d, { recursive: true });
    tryWrite(path.join(dirs[0], 'memory.limit_in_bytes'), String(limits.memoryBytes));
    tryWrite(path.join(dirs[0], 'memory.memsw.limit_in_bytes'), String(limits.memoryBytes));
    tryWrite(path.join(dirs[1], 'pids.max'), String(limits.pids));
    return new SandboxCgroup(kind, dirs);
  }

  get procs(): string[] {
    return this.dirs.map((d) => path.join(d, 'cgroup.procs'));
  }

  /** Whether the kernel killed a process in it for memory. */
  oomKilled(): boolean {
    const file = this.kind === 'v2' ? path.join(this.dirs[0], 'memory.events') : path.join(this.dirs[0], 'memory.oom_control');
    try {
      const m = /oom_kill (\d+)/.exec(readFileSync(file, 'utf8'));
      return !!m && Number(m[1]) > 0;
    } catch {
      return false;
    }
  }

  /** Bytes in use now (RSS, page cache and tmpfs of the processes in it). */
  memoryBytes(): number | undefined {
    const file = path.join(this.dirs[0], this.kind === 'v2' ? 'memory.current' : 'memory.usage_in_bytes');
    try {
      return Number(readFileSync(file, 'utf8'));
    } catch {
      return undefined;
    }
  }

  /** Removes the group's folders; false while one still holds a process (it is being killed). */
  remove(): boolean {
    let all = true;
    for (const d of this.dirs) {
      try {
        rmdirSync(d);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'ENOENT') all = false;
      }
    }
    return all;
  }
}

/**
 * Lets another uid pass through (search, not list) the folders above `dir` that this process
 * owns, as bwrap needs to bind `dir` for a user-code process running as its own uid (mkdtemp and
 * a private data dir make them 0700). What they hold stays unlisted; secrets in them are 0600.
 */
export function letThrough(dir: string): void {
  const uid = process.getuid?.();
  for (let d = path.resolve(dir); ; d = path.dirname(d)) {
    try {
      const st = statSync(d);
      if (st.uid === uid && (st.mode & 0o001) === 0) chmodSync(d, (st.mode & 0o7777) | 0o111);
    } catch {
      // Not there (yet) or not ours: bwrap says so if it matters.
    }
    if (d === path.dirname(d)) break;
  }
}

/** Whether this process sits in the root of the hierarchy with `controller` (v1), or of v2 (''). */
function inRootCgroup(controller: string): boolean {
  try {
    for (const line of readFileSync('/proc/self/cgroup', 'utf8').split('\n')) {
      const [, controllers, where] = line.split(':');
      if (controllers !== undefined && (controller === '' ? controllers === '' : controllers.split(',').includes(controller))) return where === '/';
    }
  } catch {
    // Not Linux, or /proc not mounted: no cgroups either.
  }
  return false;
}

function tryWrite(file: string, value: string): void {
  try {
    writeFileSync(file, value);
  } catch {
    // The controller is not there on this host: that limit is not applied.
  }
}
