// Reads what infra/ ships for containers and Kubernetes, as the tools would: kustomize renders
// (on a copy whose secret files are filled from their .example files), compose files with their
// variables substituted, the Dockerfile's instructions, and the commands the CLI really has.
import { execFileSync, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { cpSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parse, parseAllDocuments } from 'yaml';
import type { K8sObject } from './k8s-schema.ts';

export const ROOT = fileURLToPath(new URL('../..', import.meta.url));
export const K8S_DIR = path.join(ROOT, 'infra/k8s');
export const DOCKER_DIR = path.join(ROOT, 'infra/docker');

export function hasKubectl(): boolean {
  return spawnSync('kubectl', ['version', '--client'], { stdio: 'ignore' }).status === 0;
}

/** A value of the right shape for a secret left empty in an .example file, different for each key. */
function standIn(key: string): string {
  return /_(URL|ENDPOINT)$/.test(key) ? 'https://s3.example.com' : createHash('sha256').update(key).digest('hex').slice(0, 48);
}

/** KEY=value lines of an env file, comments and blank lines left out. */
export function envFile(text: string): Record<string, string> {
  const pairs = text.split('\n').filter((l) => /^[A-Za-z_][A-Za-z0-9_]*=/.test(l)).map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]);
  return Object.fromEntries(pairs);
}

/** `.example` env files with their empty values filled in. */
function filled(text: string): string {
  return Object.entries(envFile(text)).map(([k, v]) => `${k}=${v || standIn(k)}\n`).join('');
}

/** infra/k8s copied to a temporary folder, each *.env made from its .example (real ones are never read). */
export function stageK8s(): string {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'embers-k8s-'));
  cpSync(K8S_DIR, dir, { recursive: true, filter: (src) => !src.endsWith('.env') });
  const walk = (d: string): void => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      const p = path.join(d, e.name);
      if (e.isDirectory()) walk(p);
      else if (e.name.endsWith('.env.example')) writeFileSync(p.slice(0, -'.example'.length), filled(readFileSync(p, 'utf8')));
    }
  };
  walk(dir);
  return dir;
}

export function render(kustomization: string): K8sObject[] {
  const out = execFileSync('kubectl', ['kustomize', kustomization], { encoding: 'utf8' });
  return yamlObjects(out);
}

export function yamlObjects(text: string): K8sObject[] {
  return parseAllDocuments(text)
    .map((d) => d.toJS() as K8sObject | null)
    .filter((o): o is K8sObject => !!o);
}

/** The files a kustomization lists under `resources` that are files (not other kustomizations). */
export function resourceFiles(kustomizationDir: string): string[] {
  const k = parse(readFileSync(path.join(kustomizationDir, 'kustomization.yaml'), 'utf8')) as { resources?: string[] };
  return (k.resources ?? []).map((r) => path.join(kustomizationDir, r)).filter((p) => p.endsWith('.yaml'));
}

/** The compose file with merge keys resolved, and the .env it would be run with (from .env.example, filled). */
export function loadCompose(name = 'compose.yaml'): { file: string; compose: Compose; env: Record<string, string> } {
  const file = path.join(DOCKER_DIR, name);
  const compose = parse(readFileSync(file, 'utf8'), { merge: true }) as Compose;
  const env = envFile(filled(readFileSync(path.join(DOCKER_DIR, '.env.example'), 'utf8')));
  return { file, compose, env };
}

export interface ComposeService {
  image?: string;
  build?: { context: string; dockerfile: string; target?: string };
  command?: string[];
  user?: string;
  privileged?: boolean;
  security_opt?: string[];
  environment?: Record<string, string>;
  volumes?: string[];
  ports?: string[];
  healthcheck?: { test: string[] };
  stop_grace_period?: string;
  depends_on?: Record<string, unknown>;
  profiles?: string[];
}
export interface Compose {
  services: Record<string, ComposeService>;
  volumes?: Record<string, unknown>;
}

/**
 * Compose's variable substitution: ${VAR}, ${VAR:-default} (nested), ${VAR-default}, ${VAR:?error},
 * ${VAR?error}, and $$ for a literal $.
 */
export function interpolate(s: string, env: Record<string, string>): string {
  let out = '';
  for (let i = 0; i < s.length; i++) {
    if (s[i] !== '$') {
      out += s[i];
      continue;
    }
    if (s[i + 1] === '$') {
      out += '$';
      i++;
      continue;
    }
    if (s[i + 1] !== '{') {
      out += '$';
      continue;
    }
    let depth = 0;
    let end = i + 1;
    for (; end < s.length; end++) {
      if (s[end] === '{') depth++;
      if (s[end] === '}' && --depth === 0) break;
    }
    const body = s.slice(i + 2, end);
    const m = /^([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([\s\S]*))?$/.exec(body);
    if (!m) throw new Error(`cannot read \${${body}}`);
    const [, name, op, rest = ''] = m;
    const value = env[name];
    const unset = op?.startsWith(':') ? !value : value === undefined;
    if (unset && op?.endsWith('?')) throw new Error(`${name}: ${rest}`);
    out += unset && op?.endsWith('-') ? interpolate(rest, env) : (value ?? '');
    i = end;
  }
  return out;
}

export interface Instruction {
  op: string;
  args: string;
}

/** A Dockerfile's instructions, continuation lines joined and comments left out. */
export function dockerfile(file = path.join(DOCKER_DIR, 'Dockerfile')): Instruction[] {
  const lines = readFileSync(file, 'utf8').split('\n').filter((l) => !/^\s*#/.test(l));
  const joined = lines.join('\n').replace(/\\\n/g, ' ');
  return joined
    .split('\n')
    .map((l) => l.trim())
    .filter(Boolean)
    .map((l) => {
      const [op, ...rest] = l.split(/\s+/);
      return { op: op.toUpperCase(), args: rest.join(' ') };
    });
}

/** A COPY's sources and destination (shell form; flags such as --chown left out). */
export function copyParts(args: string): { from?: string; sources: string[]; dest: string } {
  const words = args.split(/\s+/);
  const from = words.find((w) => w.startsWith('--from='))?.slice('--from='.length);
  const paths = words.filter((w) => !w.startsWith('--'));
  return { from, sources: paths.slice(0, -1), dest: paths[paths.length - 1] };
}

/**
 * The image's files laid out as the Dockerfile COPYs them (node_modules linked, not copied) under
 * a temporary root: `app` is its WORKDIR, and each file COPYed outside it keeps its path.
 */
export function stageImage(instructions: Instruction[]): { root: string; app: string } {
  const root = mkdtempSync(path.join(os.tmpdir(), 'embers-image-'));
  const workdir = instructions.find((i) => i.op === 'WORKDIR')!.args;
  const app = path.join(root, workdir);
  mkdirSync(app, { recursive: true });
  symlinkSync(path.join(ROOT, 'node_modules'), path.join(app, 'node_modules'), 'dir');
  for (const i of instructions.filter((i) => i.op === 'COPY')) {
    const { from, sources, dest } = copyParts(i.args);
    if (from) continue;
    const target = path.isAbsolute(dest) ? path.join(root, dest) : path.join(app, dest);
    for (const src of sources) {
      const to = dest.endsWith('/') ? path.join(target, path.basename(src)) : target;
      mkdirSync(path.dirname(to), { recursive: true });
      cpSync(path.join(ROOT, src), to, { recursive: true });
    }
  }
  return { root, app };
}

/** The commands `embers --help` lists, run as the image runs it (its entry script, from its WORKDIR). */
export function cliCommands(entry: string, cwd: string): string[] {
  const r = spawnSync('sh', [entry, '--help'], { cwd, encoding: 'utf8', timeout: 60_000 });
  if (r.status !== 0) throw new Error(`${entry} --help exited ${r.status}: ${r.stderr}`);
  const list = r.stdout.split(/^Commands:$/m)[1] ?? '';
  return [...list.matchAll(/^ {2}([a-z][a-z-]*)/gm)].map((m) => m[1]);
}

/** `const NAME = 10_000;` in a source file: the drains the grace periods must cover. */
export function sourceConstant(file: string, name: string): number {
  const m = new RegExp(`const ${name} = ([\\d_]+);`).exec(readFileSync(path.join(ROOT, file), 'utf8'));
  if (!m) throw new Error(`${name} not found in ${file}`);
  return Number(m[1].replace(/_/g, ''));
}
