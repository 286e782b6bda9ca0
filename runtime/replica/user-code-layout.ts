// Where the user-code process finds the platform's code in its sandbox: at fixed paths under
// /opt/embers, so that nothing it can read (its argv, /proc/1/cmdline, a link) names where the
// platform's checkout, data dir or node binary are on the host. Pure: tested as such.
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

/** The platform's code in the sandbox. */
export const INSIDE_APP = '/opt/embers/app';
/** The platform's node_modules in the sandbox: where a staged bundle's node_modules link points. */
export const INSIDE_NODE_MODULES = `${INSIDE_APP}/node_modules`;
/** A node installed outside /usr (bound as it is) goes here. */
const INSIDE_NODE = '/opt/embers/node';
/** Of a prebuilt runtime (scheduler/runtime-build.ts), what the user-code process loads: its entry and the model session worker beside it. */
const BUNDLE_FILES = ['user-main.mjs', 'session-worker.mjs'];
/** Of the checkout, what the user-code process loads when run from source through tsx. */
const SOURCE_PATHS = ['runtime', 'core', 'native', 'sdk', 'package.json'];

/** The user-code process's runtime as it is on the host. */
export interface HostRuntime {
  execPath: string;
  execArgv: string[];
  /** runtime/user-code/main.ts under `root`, or a prebuilt runtime's user-main.mjs. */
  entry: string;
  /** tsx's loader (a file URL), when run from source. */
  tsx?: string;
  /** The platform's checkout. */
  root: string;
  nodeModules: string;
}

export interface UserCodeLaunch {
  /** The node binary and its arguments, as the process sees them. */
  node: string[];
  /** host path → path in the sandbox, read-only (none without one). */
  mounts: { from: string; to: string }[];
}

/** How to start the user-code process: with the host's paths, or (`isolate`) the sandbox's. */
export function userCodeLaunch(h: HostRuntime, isolate: boolean): UserCodeLaunch {
  const imports = (tsx: string) => ['--import', tsx];
  if (!isolate) return { node: [h.execPath, ...h.execArgv, ...(h.tsx ? imports(h.tsx) : []), h.entry], mounts: [] };
  const code = h.tsx
    ? SOURCE_PATHS.map((p) => ({ from: path.join(h.root, p), to: path.posix.join(INSIDE_APP, p) }))
    : BUNDLE_FILES.map((f) => ({ from: path.join(path.dirname(h.entry), f), to: path.posix.join(INSIDE_APP, 'runtime', f) }));
  const mounts = [...code, { from: h.nodeModules, to: INSIDE_NODE_MODULES }];
  let execPath = h.execPath;
  if (!execPath.startsWith('/usr/')) {
    const prefix = path.dirname(path.dirname(execPath));
    mounts.push({ from: prefix, to: INSIDE_NODE });
    execPath = within(prefix, execPath, INSIDE_NODE);
  }
  const entry = h.tsx ? within(h.root, h.entry, INSIDE_APP) : path.posix.join(INSIDE_APP, 'runtime', path.basename(h.entry));
  const tsx = h.tsx && pathToFileURL(within(h.nodeModules, fileURLToPath(h.tsx), INSIDE_NODE_MODULES)).href;
  return { node: [execPath, ...h.execArgv, ...(tsx ? imports(tsx) : []), entry], mounts };
}

/** `file`, under host folder `dir`, as it appears under `inside`. */
function within(dir: string, file: string, inside: string): string {
  const rel = path.relative(dir, file);
  if (rel.startsWith('..') || path.isAbsolute(rel)) throw new Error(`${file} is not under ${dir}: the sandbox cannot show it`);
  return path.posix.join(inside, rel);
}
