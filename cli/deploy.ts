// `embers deploy`: bundle with esbuild, learn the manifest in a child process, upload local
// models by content hash, then hand bundle + manifest to the gateway, which stores an
// immutable version and activates it.
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { mkdtemp, rm, stat, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { build } from 'esbuild';
import { linkPlatformModules, PLATFORM_NODE_MODULES } from '../core/bundle-dir.ts';
import { DeploySpecSchema, type DeploySpec } from '../core/contracts.ts';
import type { EmbersClient } from './client.ts';
import { CliError } from './errors.ts';
import { ProgressBar, formatBytes } from './progress.ts';

const SDK = fileURLToPath(new URL('../sdk/index.ts', import.meta.url));
/** The platform's own code a bundle takes in through `embers` (never the user's to watch). */
const PLATFORM_SOURCES = ['sdk', 'native', 'core', 'runtime'].map((dir) => `${fileURLToPath(new URL(`../${dir}/`, import.meta.url))}`);
const EXTRACT = fileURLToPath(new URL('./extract-manifest.ts', import.meta.url));
const TSX = import.meta.resolve('tsx');
/** Native or platform-provided packages: never bundled, resolved from the runtime's node_modules. */
export const EXTERNALS = ['onnxruntime-node', 'onnxruntime-common', 'sharp', '@img/*', '*.node'];

export interface DeployResult {
  name: string;
  version: string;
  endpoint: string;
  /** True when the same bundle and spec were already active (or, not activating, stored): no new version. */
  unchanged: boolean;
  /** Whether the version is now the active one (`activate: false` leaves traffic alone). */
  activated?: boolean;
  bundleBytes: number;
  models: Record<string, string>;
  /** The source files bundled from the function's own project. */
  inputs?: string[];
}

export async function bundleFunction(file: string): Promise<Buffer> {
  return (await bundleWithInputs(file)).bundle;
}

/** The bundle, and the files of the function's own project in it (what `dev --watch` watches). */
export async function bundleWithInputs(file: string): Promise<{ bundle: Buffer; inputs: string[] }> {
  try {
    const out = await build({
      metafile: true,
      entryPoints: [file],
      bundle: true,
      format: 'esm',
      platform: 'node',
      target: 'node20',
      write: false,
      // Smaller bundles import faster on a cold start; identifiers stay readable in stack traces.
      minifyWhitespace: true,
      minifySyntax: true,
      logLevel: 'silent',
      external: EXTERNALS,
      alias: { embers: SDK },
      // Imports the function's own project lacks (zod, say) fall back to the platform's packages.
      nodePaths: [PLATFORM_NODE_MODULES],
      loader: { '.txt': 'text', '.json': 'json' },
      // CommonJS dependencies call require(); give ESM bundles one.
      banner: { js: "import { createRequire as __embersCreateRequire } from 'node:module'; const require = __embersCreateRequire(import.meta.url);" },
    });
    const inputs = Object.keys(out.metafile.inputs)
      .map((f) => path.resolve(f))
      .filter((f) => !f.split(path.sep).includes('node_modules') && !PLATFORM_SOURCES.some((dir) => f.startsWith(dir)));
    return { bundle: Buffer.from(out.outputFiles[0].contents), inputs };
  } catch (err) {
    const errors = (err as { errors?: { text: string; location?: { file: string; line: number } }[] }).errors;
    const detail = errors?.map((e) => `${e.location ? `${e.location.file}:${e.location.line}: ` : ''}${e.text}`).join('\n  ') ?? (err as Error).message;
    throw new CliError(`cannot bundle ${file}:\n  ${detail}`);
  }
}

/** A directory for a bundle whose externals resolve to the platform's node_modules. */
async function bundleDir(prefix: string): Promise<string> {
  const dir = await mkdtemp(path.join(os.tmpdir(), prefix));
  await linkPlatformModules(dir);
  return dir;
}

export async function extractManifest(bundle: Buffer, source: string): Promise<unknown> {
  const dir = await bundleDir('embers-manifest-');
  try {
    const file = path.join(dir, 'bundle.mjs');
    await writeFile(file, bundle);
    const { stdout } = await promisify(execFile)(process.execPath, ['--import', TSX, EXTRACT, file], { timeout: 60_000, maxBuffer: 16 * 1024 * 1024 }).catch((err: { stderr?: string; killed?: boolean }) => {
      const why = err.killed ? 'importing it took over 60 s' : (err.stderr ?? '').trim().split('\n').slice(0, 8).join('\n  ');
      throw new CliError(`cannot load ${source} to read its manifest:\n  ${why}`);
    });
    return JSON.parse(stdout);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** Finds a local model file: relative to the function file, absolute, or inside an installed package. */
export async function resolveModelFile(ref: string, fromFile: string): Promise<string> {
  const base = path.dirname(path.resolve(fromFile));
  const candidates: string[] = [];
  if (ref.startsWith('file://')) candidates.push(fileURLToPath(ref));
  else if (path.isAbsolute(ref) || ref.startsWith('./') || ref.startsWith('../')) candidates.push(path.resolve(base, ref));
  else for (let dir = base; ; dir = path.dirname(dir)) {
    candidates.push(path.join(dir, 'node_modules', ref));
    if (dir === path.dirname(dir)) break;
  }
  for (const c of candidates) {
    const s = await stat(c).catch(() => null);
    if (s?.isFile()) return c;
  }
  throw new CliError(`model file "${ref}" not found (looked in ${candidates.slice(0, 3).join(', ')}${candidates.length > 3 ? ', …' : ''})`);
}

export async function sha256File(file: string): Promise<string> {
  const hash = createHash('sha256');
  for await (const chunk of createReadStream(file)) hash.update(chunk as Buffer);
  return hash.digest('hex');
}

/** Uploads a model file unless the platform already has it; returns its s3:// URI. */
export async function uploadModel(client: EmbersClient, file: string, label = path.basename(file)): Promise<string> {
  if (!(await stat(file).catch(() => null))?.isFile()) throw new CliError(`no such file: ${file}`, 2);
  const hex = await sha256File(file);
  const existing = await client.request<{ uri: string }>('GET', `/v1/models/sha256/${hex}`);
  if (existing.status === 200) return existing.data.uri;
  const size = (await stat(file)).size;
  const bar = new ProgressBar(`uploading ${label}`, size);
  let sent = 0;
  const stream = createReadStream(file).on('data', (chunk) => bar.update((sent += chunk.length)));
  const res = await client.call<{ uri: string }>('PUT', `/v1/models/sha256/${hex}`, Readable.toWeb(stream) as ReadableStream, {
    'content-type': 'application/octet-stream',
    'content-length': String(size),
  });
  bar.done(`uploaded ${formatBytes(size)}`);
  return res.uri;
}

/** A bare model's name from its file: `ch_ppocr_cls.onnx` → `ch-ppocr-cls`. */
export function modelNameOf(file: string): string {
  const base = path.basename(file).replace(/\.onnx$/i, '').toLowerCase().replace(/[^a-z0-9-]+/g, '-').replace(/^-+|-+$/g, '').slice(0, 63).replace(/-+$/, '');
  return base || 'model';
}

/** Deploys an ONNX file as it is: uploaded by content hash, run by the platform's handler with dynamic batching. */
export async function deployModelFile(client: EmbersClient, file: string, o: { name?: string; batching?: { maxBatchSize?: number; maxDelayMs?: number }; activate?: boolean } = {}): Promise<DeployResult> {
  const name = o.name ?? modelNameOf(file);
  const uri = await uploadModel(client, file, name);
  const batching = { maxBatchSize: o.batching?.maxBatchSize ?? 16, maxDelayMs: o.batching?.maxDelayMs ?? 4 };
  const spec = DeploySpecSchema.safeParse({ name, kind: 'model', models: { model: uri }, batching });
  if (!spec.success) throw new CliError(`cannot deploy ${file}:\n${spec.error.issues.map((i) => `  ${i.path.join('.')}: ${i.message}`).join('\n')}`);
  const res = await client.call<{ name: string; version: string; endpoint: string; unchanged: boolean; activated: boolean }>('POST', deployRoute(o.activate), { spec: spec.data });
  return { ...res, bundleBytes: 0, models: { model: uri } };
}

/** Where a deploy goes: `activate: false` stores the version and leaves traffic alone. */
const deployRoute = (activate: boolean | undefined) => (activate === false ? '/v1/functions?activate=false' : '/v1/functions');

export async function deployFile(client: EmbersClient, file: string, log: (line: string) => void = () => {}, o: { activate?: boolean } = {}): Promise<DeployResult> {
  const source = path.resolve(file);
  if (!(await stat(source).catch(() => null))?.isFile()) throw new CliError(`no such file: ${file}`, 2);
  const { bundle, inputs } = await bundleWithInputs(source);
  log(`bundled ${path.relative(process.cwd(), source)} (${formatBytes(bundle.length)})`);
  const raw = (await extractManifest(bundle, file)) as Partial<DeploySpec> & { models?: Record<string, string> };
  const models: Record<string, string> = {};
  for (const [handle, ref] of Object.entries(raw.models ?? {})) {
    if (typeof ref !== 'string') throw new CliError(`model ${handle}: expected a string, got ${typeof ref}`);
    models[handle] = ref.startsWith('s3://') ? ref : await uploadModel(client, await resolveModelFile(ref, source), `${raw.name}.${handle}`);
  }
  const spec = DeploySpecSchema.safeParse({ ...raw, models });
  if (!spec.success) {
    const lines = spec.error.issues.map((i) => `  ${i.path.join('.') || '(function)'}: ${i.message}`);
    throw new CliError(`${file} does not define a valid function:\n${lines.join('\n')}`);
  }
  const res = await client.call<{ name: string; version: string; endpoint: string; unchanged: boolean; activated: boolean }>('POST', deployRoute(o.activate), { spec: spec.data, bundle: bundle.toString('base64') });
  return { ...res, bundleBytes: bundle.length, models, inputs };
}
