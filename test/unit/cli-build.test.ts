// The prebuilt CLI (cli/built.mjs) gives each source file's `import.meta.url` its own URL, but
// only where it is code: the same words inside strings and template text are code for users'
// bundles and projects, and stay.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
// @ts-expect-error: a plain ES module without types
import { codeOccurrences } from '../../cli/built.mjs';

const find = (text: string) => (codeOccurrences(text) as number[]).map((at) => text.slice(at - 2, at));

describe('the prebuilt CLI', () => {
  it('finds import.meta.url in code, not in strings, comments or template text', () => {
    const text = [
      'new URL("x", import.meta.url);',
      "const s = 'import.meta.url'; // import.meta.url",
      'const t = `a ${f(import.meta.url)} import.meta.url ${`${import.meta.url}`}`;',
      '/* import.meta.url */ g({ a: 1 }, import.meta.url);',
      'const banner = "createRequire(import.meta.url)";',
      'const template = `',
      '  new URL("../functions/hello.ts", import.meta.url);',
      '`;',
      'h(import.meta.urlish, import.meta.url)',
    ].join('\n');
    assert.deepEqual(find(text), [', ', 'f(', '${', ', ', ', ']);
  });
});
