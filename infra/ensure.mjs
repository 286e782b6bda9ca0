#!/usr/bin/env node
// Runs before `npm start`, `npm test` and `npm run bench` on any machine: installs the npm dependencies when
// they are missing or stale, and checks for redis-server, installing it with apt-get when
// that is possible, else stopping with a message that says what to do.
// Plain JavaScript with no dependencies: it must run before node_modules exists.
import { spawnSync } from 'node:child_process';
import { existsSync, statSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const purpose = process.argv[2] ?? 'start';

function fail(message) {
  process.stderr.write(`\nembers: ${message}\n\n`);
  process.exit(1);
}

const [major, minor] = process.versions.node.split('.').map(Number);
if (major < 20 || (major === 20 && minor < 10)) fail(`Node.js ${process.versions.node} is too old: Embers needs 20.10 or newer (https://nodejs.org).`);
// The test runner's --test-force-exit (a test file whose event loop a stuck library keeps alive
// must not hold the suite for ever) came in 20.14.
if (purpose === 'test' && major === 20 && minor < 14) fail(`Node.js ${process.versions.node} runs Embers, but npm test needs 20.14 or newer (node --test --test-force-exit; https://nodejs.org).`);

// 1. npm dependencies: install when node_modules is missing or older than the lockfile.
const lock = path.join(root, 'package-lock.json');
const installed = path.join(root, 'node_modules', '.package-lock.json');
const stale = !existsSync(installed) || (existsSync(lock) && statSync(lock).mtimeMs > statSync(installed).mtimeMs + 1000);
if (stale) {
  // `npm install` (not `npm ci`): it honours the lockfile, and npm 11 wrongly reports this lock
  // "out of sync" for msgpackr-extract's per-platform optional packages.
  process.stderr.write('embers: installing npm dependencies (npm install)…\n');
  const r = spawnSync('npm', ['install', '--no-audit', '--no-fund'], { cwd: root, stdio: 'inherit' });
  if (r.status !== 0) fail('`npm install` failed (see above). Embers needs the npm registry once to install its dependencies.');
}

// 2. redis-server: spawned by `npm start` (unless EMBERS_REDIS_URL is set), by the tests and by
// the bench's own `embers dev`.
const needRedis = purpose !== 'start' || !process.env.EMBERS_REDIS_URL;
const hasRedis = () => spawnSync('redis-server', ['--version']).status === 0;
if (needRedis && !hasRedis()) {
  const canApt = process.getuid?.() === 0 && spawnSync('apt-get', ['--version']).status === 0;
  if (canApt) {
    process.stderr.write('embers: redis-server not found; installing it with apt-get…\n');
    spawnSync('apt-get', ['update', '-qq'], { stdio: 'inherit' });
    spawnSync('apt-get', ['install', '-y', '-qq', 'redis-server'], { stdio: 'inherit', env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' } });
  }
  if (!hasRedis()) {
    fail(
      'redis-server is not installed.\n' +
        '  Debian/Ubuntu: sudo apt-get install redis-server\n' +
        '  macOS:         brew install redis\n' +
        (purpose === 'start' ? '  or use a running Redis: EMBERS_REDIS_URL=redis://host:6379 npm start' : `  (the ${purpose === 'test' ? 'tests start their' : 'bench starts its'} own redis-server on a free port)`),
    );
  }
}

// 3. bubblewrap: the sandbox user code runs in (runtime/replica/sandbox.ts). Installed with apt-get when
// that is possible; without it, the platform still starts and says what it cannot enforce
// (user code then runs unsandboxed, for the default tenant only), and the sandbox tests skip.
const hasBwrap = () => spawnSync('bwrap', ['--version']).status === 0;
if (process.platform === 'linux' && !hasBwrap()) {
  const canApt = process.getuid?.() === 0 && spawnSync('apt-get', ['--version']).status === 0;
  if (canApt) {
    process.stderr.write('embers: bubblewrap (bwrap) not found; installing it with apt-get to sandbox user code…\n');
    let r = spawnSync('apt-get', ['install', '-y', '-qq', 'bubblewrap'], { stdio: 'inherit', env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' } });
    if (r.status !== 0) {
      spawnSync('apt-get', ['update', '-qq'], { stdio: 'inherit' });
      r = spawnSync('apt-get', ['install', '-y', '-qq', 'bubblewrap'], { stdio: 'inherit', env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' } });
    }
  }
  if (!hasBwrap()) {
    process.stderr.write(
      'embers: bubblewrap is not installed, so user code cannot be sandboxed on this machine: only the\n' +
        "  default tenant's functions will run (EMBERS_ALLOW_UNSANDBOXED=1 runs every tenant's).\n" +
        '  Debian/Ubuntu: sudo apt-get install bubblewrap\n',
    );
  }
}
