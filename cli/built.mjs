// The CLI as one prebuilt bundle (esbuild, code split so a command loads only what it runs),
// rebuilt when a source file or the installed packages change: `embers --version` then costs
// Node's start and a few files, not tsx transpiling the platform's TypeScript on every start.
// Built under cli/.built/<fingerprint>/ on first use; where that cannot be written, or the build
// fails, the CLI runs from source under tsx as before.
import { createHash } from 'node:crypto';
import { existsSync, readdirSync, renameSync, rmSync, statSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const OUT = path.join(ROOT, 'cli', '.built');
/** How long a replaced build is kept: a CLI that found it just before may still be loading it. */
const KEEP_OLD_MS = 10 * 60_000;
/** Folders whose files go into the bundle. */
const SOURCES = ['cli', 'core', 'gateway', 'scheduler', 'platform', 'runtime', 'native', 'sdk'];
/**
 * Packages loaded from node_modules at run time: native code or its optional accelerators
 * (msgpackr, under BullMQ), files found by path from their own folder, or tools run as programs.
 */
const EXTERNAL = ['@aws-sdk/*', 'bullmq', 'msgpackr', 'onnxruntime-node', 'sharp', 'pino', 'pino-pretty', 'esbuild', 'tsx', 's3rver', 'playwright-core', 'swagger-ui-dist'];

/** Every source file's path, size and modification time, and the lock file's: a new one when anything changes. */
function fingerprint() {
  const hash = createHash('sha256');
  const walk = (dir) => {
    for (const e of readdirSync(dir, { withFileTypes: true })) {
      if (e.name === '.built' || e.name === 'node_modules') continue;
      const p = path.join(dir, e.name);
      if (e.isDirectory()) walk(p);
      else if (/\.(ts|mjs|json|lua)$/.test(e.name)) {
        const s = statSync(p);
        hash.update(`${p}\0${s.size}\0${s.mtimeMs}\n`);
      }
    }
  };
  for (const dir of SOURCES) walk(path.join(ROOT, dir));
  for (const file of ['package-lock.json', 'package.json']) {
    const s = statSync(path.join(ROOT, file), { throwIfNoEntry: false });
    hash.update(`${file}\0${s?.size}\0${s?.mtimeMs}\n`);
  }
  return hash.digest('hex').slice(0, 16);
}

/**
 * Where `import.meta.url` is code, not text: outside strings, template literals' text and
 * comments (a template literal's `${…}` is code again). Regular expressions are not told apart:
 * no source writes that name inside one.
 */
export function codeOccurrences(text, name = 'import.meta.url') {
  const found = [];
  /** Open template literals, each with the brace depth of the `${` it is inside, if any. */
  const templates = [];
  let braces = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    const inTemplateText = templates.length > 0 && templates[templates.length - 1] === null;
    if (inTemplateText) {
      if (c === '\\') i++;
      else if (c === '`') templates.pop();
      else if (c === '$' && text[i + 1] === '{') {
        templates[templates.length - 1] = braces++;
        i++;
      }
      continue;
    }
    if (c === '/' && text[i + 1] === '/') i = text.indexOf('\n', i) === -1 ? text.length : text.indexOf('\n', i);
    else if (c === '/' && text[i + 1] === '*') i = text.indexOf('*/', i + 2) === -1 ? text.length : text.indexOf('*/', i + 2) + 1;
    else if (c === '"' || c === "'") {
      for (i++; i < text.length && text[i] !== c && text[i] !== '\n'; i++) if (text[i] === '\\') i++;
    } else if (c === '`') templates.push(null);
    else if (c === '{') braces++;
    else if (c === '}') {
      braces--;
      if (templates.length && templates[templates.length - 1] === braces) templates[templates.length - 1] = null;
    } else if (c === name[0] && text.startsWith(name, i) && !/[\w$.]/.test(text[i - 1] ?? '') && !/[\w$]/.test(text[i + name.length] ?? '')) {
      found.push(i);
      i += name.length - 1;
    }
  }
  return found;
}

/**
 * `import.meta.url` in each source file becomes that file's own URL: modules find files beside
 * their source (Lua scripts, the console, the runtime's entries), wherever the bundle sits. Inside
 * strings (code written for users' bundles and projects) it stays as it is.
 */
const sourceUrls = {
  name: 'source-urls',
  setup(b) {
    b.onLoad({ filter: /\.ts$/ }, async (args) => {
      if (args.path.includes(`${path.sep}node_modules${path.sep}`)) return undefined;
      const url = JSON.stringify(pathToFileURL(args.path).href);
      const text = await readFile(args.path, 'utf8');
      let contents = '';
      let from = 0;
      for (const at of codeOccurrences(text)) {
        contents += text.slice(from, at) + url;
        from = at + 'import.meta.url'.length;
      }
      return { contents: contents + text.slice(from), loader: 'ts' };
    });
  },
};

/** The bundle's entry, built now if it is missing or stale; null when it cannot be built here. */
export async function builtCli() {
  try {
    const key = fingerprint();
    const dir = path.join(OUT, key);
    const entry = path.join(dir, 'embers.js');
    if (existsSync(entry)) return entry;
    const { build } = await import('esbuild');
    // Built aside and moved in whole: two CLIs starting at once never run a half-written one.
    const tmp = `${dir}.${process.pid}.tmp`;
    await build({
      entryPoints: { embers: path.join(ROOT, 'cli', 'main.ts') },
      outdir: tmp,
      bundle: true,
      splitting: true,
      format: 'esm',
      platform: 'node',
      target: 'node20',
      chunkNames: 'chunk-[hash]',
      external: EXTERNAL,
      // Bundled CommonJS calls require(); an ES module has none of its own.
      banner: { js: "import { createRequire as embersCreateRequire } from 'node:module'; const require = embersCreateRequire(import.meta.url);" },
      plugins: [sourceUrls],
      logLevel: 'silent',
    });
    try {
      renameSync(tmp, dir);
    } catch {
      rmSync(tmp, { recursive: true, force: true });
      if (!existsSync(entry)) return null;
    }
    // Older builds go once no CLI can still be starting from one (nor building one).
    for (const old of readdirSync(OUT)) {
      const at = path.join(OUT, old);
      if (old !== key && Date.now() - statSync(at).mtimeMs > KEEP_OLD_MS) rmSync(at, { recursive: true, force: true });
    }
    return entry;
  } catch {
    return null;
  }
}
