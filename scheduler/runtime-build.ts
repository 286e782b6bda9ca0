// Replicas run a prebuilt JavaScript runtime: esbuild bundles runtime/replica/main.ts, the user-code
// process and the model session worker, with the npm packages they use, once per agent start,
// so a replica's spawn costs Node's start-up and one file's compile, not loading tsx,
// transpiling TypeScript and resolving hundreds of package files on every cold start.
import { createHash } from 'node:crypto';
import { cp, readdir, readFile, stat } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';
import { linkPlatformModules } from '../core/bundle-dir.ts';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
/** Each entry's file in the bundle: the replica's, the user-code process's, the model session worker's. */
const ENTRIES: Record<string, string> = { main: 'runtime/replica/main.ts', 'user-main': 'runtime/user-code/main.ts', 'session-worker': 'native/session-worker.ts' };
/** Packages the runtime loads from node_modules rather than from its bundle. */
const LINKED_PACKAGES = ['onnxruntime-node', 'sharp', 'pino', 'pino-pretty'];

export interface BuiltRuntime {
  /** The replica entry to fork. */
  main: string;
}

/** Builds (or reuses) the runtime bundle under `dir`, keyed by a hash of its sources. */
export async function buildRuntime(dir: string): Promise<BuiltRuntime> {
  const out = path.join(dir, await sourceKey());
  const main = path.join(out, 'main.mjs');
  if (!(await stat(main).catch(() => null))) {
    await linkPlatformModules(out);
    // The Lua scripts, read beside the bundle (core/lua.ts); main.mjs, written last, marks a whole build.
    await cp(path.join(ROOT, 'core', 'lua'), path.join(out, 'lua'), { recursive: true });
    await build({
      entryPoints: Object.fromEntries(Object.entries(ENTRIES).map(([name, e]) => [name, path.join(ROOT, e)])),
      outdir: out,
      entryNames: '[name]',
      outExtension: { '.js': '.mjs' },
      bundle: true,
      format: 'esm',
      platform: 'node',
      target: 'node20',
      // npm packages are bundled in too: Node's ESM loader resolves, reads and scans every file
      // of a CommonJS package it imports (ioredis, BullMQ, the S3 client), which made up half
      // of a replica's start-up CPU. Native modules, and pino (its transports load by file
      // path), load from the platform's node_modules, linked next to the bundle.
      external: LINKED_PACKAGES,
      // Bundled CommonJS calls require(); an ES module has none of its own.
      banner: { js: "import { createRequire as embersCreateRequire } from 'node:module'; const require = embersCreateRequire(import.meta.url);" },
      logLevel: 'silent',
    });
  }
  return { main };
}

/**
 * Changes whenever what goes into the bundle changes (a runtime source, a bundled package's
 * version, this build's options), so a stale build is never used.
 */
async function sourceKey(): Promise<string> {
  const hash = createHash('sha256');
  // gateway: a replica's calls to other functions use its admission, reply hub and chunk reader.
  for (const folder of ['runtime/channel', 'runtime/replica', 'runtime/user-code', 'native', 'core', 'core/lua', 'core/oip', 'sdk', 'gateway']) {
    for (const f of (await readdir(path.join(ROOT, folder))).sort()) {
      if (!/\.(ts|mjs|lua)$/.test(f)) continue;
      hash.update(f).update(await readFile(path.join(ROOT, folder, f)));
    }
  }
  for (const file of ['package-lock.json', 'scheduler/runtime-build.ts']) hash.update(file).update(await readFile(path.join(ROOT, file)).catch(() => Buffer.alloc(0)));
  return hash.digest('hex').slice(0, 16);
}
