// The docs' commands, run as written: every fenced block of README.md and docs/guides/*.md whose
// info string is sh, bash or shell runs against the platform `npm start` runs (`embers dev` in a
// child process, on a port the OS gives it), unless the line right before it marks it
// illustrative. docs/README.md ("Commands in the docs") states the conventions read here:
//
//   <!-- illustrative: why -->   the next block is not run (a network, a GPU, another machine, a
//                                command that runs until Ctrl-C); the reason is required.
//   <!-- file: hello.ts -->      the next block (any language) is written to that file in the
//                                working folder, in its place in the order, for the blocks after it.
//
// Each document's blocks run in order, in a folder of their own that stands for the checkout:
// links to what it ships (functions, bench, docs…) and to node_modules, and `.embers`, the
// platform's data folder (its api-key and admin-key files). Each block runs under
// `bash -euo pipefail` with EMBERS_URL and EMBERS_API_KEY set (as the tour exports them),
// `embers` on PATH and `npx embers` answered by it (from the checkout, npx runs the same
// cli/bin.mjs), curl failing on an HTTP error status, the variables earlier blocks of the
// document assigned (as in one terminal), and a time limit. A block that fails names its
// document, line, commands and output.
import assert from 'node:assert/strict';
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { chmod, lstat, mkdir, mkdtemp, open, readdir, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
/** The documents whose blocks run, README first, then the guides by name. */
const DOCS = ['README.md', ...readdirSync(path.join(ROOT, 'docs/guides')).filter((f) => f.endsWith('.md')).sort().map((f) => `docs/guides/${f}`)];
const SHELLS = new Set(['sh', 'bash', 'shell']);
/** Longest one block may run; a model's cold start takes seconds on CPU. */
const BLOCK_TIMEOUT_MS = 90_000;
const START_TIMEOUT_MS = 180_000;
/** Where git cannot say what the checkout ships: its entries a working folder does not link to. */
const NOT_LINKED = new Set(['.git', '.embers', 'test-results']);

type Marker = { kind: 'illustrative'; reason: string } | { kind: 'file'; name: string };

interface Block {
  doc: string;
  /** 1-based line of the opening fence. */
  line: number;
  lang: string;
  body: string;
  marker?: Marker;
}

const MARKER = /^<!--\s*(illustrative|file)\b\s*:?\s*(.*?)\s*-->$/;
const FENCE = /^( {0,3})(`{3,}|~{3,})\s*([^\s`]*)/;

/** Every fenced block of a document, with the marker on the line right before it; and markers misused. */
function parse(doc: string): { blocks: Block[]; problems: string[] } {
  const lines = readFileSync(path.join(ROOT, doc), 'utf8').split('\n');
  const blocks: Block[] = [];
  const problems: string[] = [];
  for (let i = 0; i < lines.length; i++) {
    const m = MARKER.exec(lines[i].trim());
    if (m) {
      const [, kind, arg] = m;
      if (kind === 'illustrative' && !arg) problems.push(`${doc}:${i + 1}: say why a block is illustrative: <!-- illustrative: why -->`);
      if (kind === 'file' && (!arg || path.isAbsolute(arg) || arg.split('/').includes('..'))) problems.push(`${doc}:${i + 1}: <!-- file: name --> takes a path inside the working folder`);
      if (!FENCE.test(lines[i + 1] ?? '')) problems.push(`${doc}:${i + 1}: a marker must be followed at once by a fenced block`);
      continue;
    }
    const open = FENCE.exec(lines[i]);
    if (!open) continue;
    const [, indent, fence, lang] = open;
    const body: string[] = [];
    let j = i + 1;
    for (; j < lines.length; j++) {
      const t = lines[j].trim();
      if (t.startsWith(fence) && /^(`+|~+)$/.test(t)) break;
      body.push(lines[j].startsWith(indent) ? lines[j].slice(indent.length) : lines[j]);
    }
    const before = i > 0 ? MARKER.exec(lines[i - 1].trim()) : null;
    const marker: Marker | undefined = before ? (before[1] === 'file' ? { kind: 'file', name: before[2] } : { kind: 'illustrative', reason: before[2] }) : undefined;
    blocks.push({ doc, line: i + 1, lang: lang.toLowerCase(), body: body.join('\n'), marker });
    i = j;
  }
  return { blocks, problems };
}

const runnable = (b: Block) => SHELLS.has(b.lang) && b.marker?.kind !== 'illustrative';

/** Names a block assigns at the start of a line (`NAME=…`, `export NAME=…`): carried to the blocks after it. */
function assigned(body: string): string[] {
  const names = new Set<string>();
  for (const m of body.matchAll(/^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=/gm)) names.add(m[1]);
  return [...names];
}

/** A block without its `# …` comments (expected output may name 127.0.0.1:8787 as npm start prints it). */
const withoutComments = (body: string) =>
  body
    .split('\n')
    .map((l) => l.replace(/(^|\s)#.*$/, ''))
    .join('\n');

const q = (s: string) => `'${s.replaceAll("'", `'\\''`)}'`;

/** The environment without the caller's EMBERS_* settings (the docs' platform runs on its defaults) or node:test's. */
function cleanEnv(extra: Record<string, string>): NodeJS.ProcessEnv {
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('EMBERS_') && k !== 'NODE_TEST_CONTEXT'));
  return { ...env, ...extra };
}

function killGroup(child: ChildProcess, signal: NodeJS.Signals): void {
  if (!child.pid) return;
  try {
    process.kill(-child.pid, signal);
  } catch {
    // Already gone.
  }
}

let tmp: string;
let dev: ChildProcess | undefined;
let devOutput = '';
let devExited = false;
let url = '';
let apiKey = '';
let bin: string;
let curlHome: string;

before(async () => {
  tmp = await mkdtemp(path.join(os.tmpdir(), 'embers-docs-'));
  const dataDir = path.join(tmp, 'data');
  // As `npm start` starts it (package.json), in a process group of its own so that stopping it
  // reaches whatever it left.
  dev = spawn(process.execPath, ['--max-semi-space-size=32', 'cli/bin.mjs', 'dev'], {
    cwd: ROOT,
    env: cleanEnv({ EMBERS_DATA_DIR: dataDir, EMBERS_PORT: '0', EMBERS_LOG_PRETTY: 'false' }),
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const keep = (d: Buffer) => (devOutput = (devOutput + d.toString('utf8')).slice(-200_000));
  dev.stdout!.on('data', keep);
  dev.stderr!.on('data', keep);
  dev.once('exit', () => (devExited = true));
  const end = Date.now() + START_TIMEOUT_MS;
  while (!devOutput.includes('Ctrl-C stops everything')) {
    if (devExited) throw new Error(`embers dev exited before its banner:\n${devOutput.slice(-4000)}`);
    if (Date.now() > end) throw new Error(`embers dev printed no banner within ${START_TIMEOUT_MS / 1000} s:\n${devOutput.slice(-4000)}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  url = /Embers is running at (\S+)/.exec(devOutput)![1];
  apiKey = /API key:\s+(\S+)/.exec(devOutput)![1];
  bin = path.join(tmp, 'bin');
  await mkdir(bin);
  const cli = `exec ${q(process.execPath)} ${q(path.join(ROOT, 'cli/bin.mjs'))} "$@"`;
  await writeFile(path.join(bin, 'embers'), `#!/bin/sh\n${cli}\n`);
  // From the checkout, `npx embers` runs cli/bin.mjs; any other package goes to the real npx.
  const npx = (process.env.PATH ?? '').split(path.delimiter).map((d) => path.join(d, 'npx')).find((f) => existsSync(f));
  await writeFile(path.join(bin, 'npx'), `#!/bin/sh\nif [ "\${1-}" = embers ]; then shift; ${cli}; fi\n${npx ? `exec ${q(npx)} "$@"` : 'echo "npx: not found" >&2; exit 127'}\n`);
  for (const f of ['embers', 'npx']) await chmod(path.join(bin, f), 0o755);
  // curl exits non-zero on an HTTP error status, still printing the answer (curl before 7.76
  // knows only --fail, which drops it): a doc's curl that gets a 4xx or 5xx fails its block.
  curlHome = path.join(tmp, 'curl');
  await mkdir(curlHome);
  const withBody = await new Promise<boolean>((resolve) =>
    execFile('curl', ['--help', 'all'], (err, stdout) => resolve(!err && stdout.includes('--fail-with-body'))),
  );
  await writeFile(path.join(curlHome, '.curlrc'), `${withBody ? 'fail-with-body' : 'fail'}\n`);
});

after(async () => {
  if (dev && !devExited) {
    const exited = new Promise((r) => dev!.once('exit', r));
    dev.kill('SIGTERM');
    // embers dev gives up on a stop after 45 s.
    const timer = setTimeout(() => killGroup(dev!, 'SIGKILL'), 50_000);
    await exited;
    clearTimeout(timer);
  }
  if (dev) killGroup(dev, 'SIGKILL');
  if (tmp) await rm(tmp, { recursive: true, force: true });
});

/** A folder that stands for the checkout after `npm start`: links to its entries, and `.embers`. */
async function workFolder(doc: string): Promise<string> {
  const dir = path.join(tmp, doc.replace(/[^\w.-]+/g, '-'));
  await mkdir(dir);
  for (const entry of await checkoutEntries()) await symlink(path.join(ROOT, entry), path.join(dir, entry));
  await symlink(path.join(tmp, 'data'), path.join(dir, '.embers'));
  return dir;
}

/**
 * What the checkout ships (git's top-level entries) and node_modules: never a file a reader made
 * following the docs in the checkout (hello.ts, my-project/), which a block would write through.
 */
async function checkoutEntries(): Promise<string[]> {
  const tracked = await new Promise<string[] | null>((resolve) =>
    execFile('git', ['ls-tree', '--name-only', 'HEAD'], { cwd: ROOT }, (err, stdout) => resolve(err ? null : stdout.split('\n').filter(Boolean))),
  );
  const all = await readdir(ROOT);
  return tracked ? [...new Set([...tracked, 'node_modules'])].filter((e) => all.includes(e)) : all.filter((e) => !NOT_LINKED.has(e));
}

interface Outcome {
  code: number | null;
  timedOut: boolean;
  output: string;
}

/**
 * Runs one block in `dir` under bash -euo pipefail. BASH_ENV (read before the block) brings in
 * the variables earlier blocks assigned and a trace of each command with its line in the
 * document, and, on exit, saves the variables this block assigns.
 */
async function runBlock(b: Block, dir: string, scratch: string, n: number): Promise<Outcome> {
  const state = path.join(scratch, 'variables.sh');
  const script = path.join(scratch, `block-${n}.sh`);
  const prelude = path.join(scratch, `prelude-${n}.sh`);
  const names = assigned(b.body);
  await writeFile(script, `${b.body}\n`);
  await writeFile(
    prelude,
    [
      `if [ -f ${q(state)} ]; then . ${q(state)}; fi`,
      names.length ? `trap '{ set +x; } 2>/dev/null; declare -p ${names.join(' ')} >> ${q(state)} 2>/dev/null || true' EXIT` : '',
      // The fence is line b.line, so the block's first line is b.line + 1.
      `PS4='+ ${b.doc}:$((LINENO + ${b.line})): '`,
      'set -x',
      '',
    ].join('\n'),
  );
  // Output goes to a file, as a terminal would take it: one stream for the block's commands and
  // their errors, in order, read once the block ends.
  const log = path.join(scratch, `block-${n}.log`);
  const out = await open(log, 'w');
  const child = spawn('bash', ['-euo', 'pipefail', script], {
    cwd: dir,
    env: cleanEnv({ PATH: `${bin}:${process.env.PATH}`, EMBERS_URL: url, EMBERS_API_KEY: apiKey, BASH_ENV: prelude, CURL_HOME: curlHome, NO_COLOR: '1' }),
    detached: true,
    stdio: ['ignore', out.fd, out.fd],
  });
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    killGroup(child, 'SIGKILL');
  }, BLOCK_TIMEOUT_MS);
  const code = await new Promise<number | null>((resolve) => child.once('exit', (c) => resolve(c)));
  clearTimeout(timer);
  // Anything the block left running in the background.
  killGroup(child, 'SIGKILL');
  await out.close();
  return { code, timedOut, output: await readFile(log, 'utf8') };
}

function failure(b: Block, o: Outcome): string {
  const numbered = b.body
    .split('\n')
    .map((l, i) => `  ${String(b.line + 1 + i).padStart(4)}  ${l}`)
    .join('\n');
  const why = o.timedOut ? `ran past ${BLOCK_TIMEOUT_MS / 1000} s` : `exited ${o.code}`;
  return `${b.doc}:${b.line}: the block ${why} (mark it <!-- illustrative: why --> if it cannot run here):\n${numbered}\n--- its output (each command after "+ file:line:") ---\n${o.output.slice(-6000)}`;
}

const title = (b: Block) => {
  const first = b.body.split('\n').find((l) => l.trim() && !l.trim().startsWith('#')) ?? '';
  return `${b.doc}:${b.line} ${first.trim().slice(0, 72)}`;
};

describe('the docs mark their blocks as the command-block test reads them', () => {
  it('every marker is followed by a block, says why or names a file, and runnable blocks reach the platform by $EMBERS_URL', () => {
    const problems: string[] = [];
    for (const doc of DOCS) {
      const parsed = parse(doc);
      problems.push(...parsed.problems);
      for (const b of parsed.blocks.filter(runnable)) {
        if (/(127\.0\.0\.1|localhost):8787/.test(withoutComments(b.body))) problems.push(`${b.doc}:${b.line}: a runnable block names port 8787; use $EMBERS_URL (the test's platform is on another port)`);
      }
    }
    assert.deepEqual(problems, []);
  });
});

for (const doc of DOCS) {
  const steps = parse(doc).blocks.filter((b) => b.marker?.kind === 'file' || runnable(b));
  describe(`${doc}: its commands run as written`, () => {
    let dir: string;
    let scratch: string;
    let failed: string | undefined;
    before(async () => {
      dir = await workFolder(doc);
      scratch = await mkdtemp(path.join(tmp, 'scratch-'));
    });
    steps.forEach((b, n) => {
      const name = b.marker?.kind === 'file' ? `${b.doc}:${b.line} writes ${b.marker.name}` : title(b);
      it(name, async (t) => {
        if (failed) return t.skip(`after ${failed} failed`);
        try {
          if (b.marker?.kind === 'file') {
            // Into the folder, never through a link into the checkout.
            for (let p = b.marker.name; p !== '.'; p = path.dirname(p)) {
              if ((await lstat(path.join(dir, p)).catch(() => null))?.isSymbolicLink()) throw new Error(`${b.doc}:${b.line}: <!-- file: ${b.marker.name} --> would write into the checkout (${p})`);
            }
            const file = path.join(dir, b.marker.name);
            await mkdir(path.dirname(file), { recursive: true });
            await writeFile(file, `${b.body}\n`);
            return;
          }
          const o = await runBlock(b, dir, scratch, n);
          assert.ok(o.code === 0 && !o.timedOut, failure(b, o));
        } catch (err) {
          failed = `${b.doc}:${b.line}`;
          throw err;
        }
      });
    });
  });
}
