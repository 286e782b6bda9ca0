// The trust boundary in the tree: runtime/user-code/ runs the tenant's code in the sandbox, and
// runtime/channel/ is what both sides of the replica ↔ user-code channel share. Neither may
// import, even for a type, anything that reaches Redis, S3, the platform's settings or its keys:
// followed through every import of the repository's own files, to the packages they name.
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const UNTRUSTED = ['runtime/user-code', 'runtime/channel'];
/** Packages that hold or reach the platform's credentials and stores. */
const FORBIDDEN_PACKAGES = [/^ioredis$/, /^bullmq$/, /^@aws-sdk\//, /^s3rver$/, /^prom-client$/];
/** The repository's own modules that do. */
const FORBIDDEN_MODULES = [/^core\/(redis|keys|config|s3|secrets|sealed|buckets|lua|live-queue|jobs|usage|budgets|registry|tenants)\.ts$/, /^runtime\/replica\//, /^gateway\//, /^scheduler\//, /^platform\//, /^cli\//];

const IMPORT = /(?:^|[\s;])(?:import|export)\s[^'"]*?from\s*['"]([^'"]+)['"]|(?:^|[\s;(])import\s*\(\s*['"]([^'"]+)['"]\s*\)|^import\s+['"]([^'"]+)['"]/gm;

function importsOf(file: string): string[] {
  const text = readFileSync(path.join(ROOT, file), 'utf8');
  return [...text.matchAll(IMPORT)].map((m) => m[1] ?? m[2] ?? m[3]);
}

/** Every import chain from `start` to a forbidden module or package, as "a → b → c". */
function forbiddenChains(start: string): string[] {
  const found: string[] = [];
  const seen = new Set<string>();
  const walk = (file: string, chain: string[]): void => {
    if (seen.has(file)) return;
    seen.add(file);
    for (const spec of importsOf(file)) {
      if (spec.startsWith('.')) {
        const target = path.relative(ROOT, path.resolve(ROOT, path.dirname(file), spec));
        if (FORBIDDEN_MODULES.some((r) => r.test(target))) found.push([...chain, target].join(' → '));
        else if (/\.(ts|mjs|js)$/.test(target)) walk(target, [...chain, target]);
      } else if (FORBIDDEN_PACKAGES.some((r) => r.test(spec))) found.push([...chain, spec].join(' → '));
    }
  };
  walk(start, [start]);
  return found;
}

test('no file of the user-code side or the channel reaches Redis, S3, config or keys', () => {
  const files = UNTRUSTED.flatMap((dir) => readdirSync(path.join(ROOT, dir)).filter((f) => f.endsWith('.ts')).map((f) => `${dir}/${f}`));
  assert.ok(files.includes('runtime/user-code/main.ts'), 'the user-code entry is where this test looks');
  const chains = files.flatMap(forbiddenChains);
  assert.deepEqual([...new Set(chains)], [], `the untrusted side imports what holds the platform's credentials:\n${chains.join('\n')}`);
});

test('the boundary check sees a forbidden import through a chain', () => {
  // The trusted entry reaches them, as it must: proof that the walk follows imports at all.
  const chains = forbiddenChains('runtime/replica/main.ts');
  assert.ok(chains.some((c) => c.endsWith('ioredis') || c.includes('core/redis.ts')), chains.join('\n'));
});
