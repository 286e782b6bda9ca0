// The references under docs/reference/ are what `npm run docs` generates from the code today: a
// change to the configuration schema, a CLI command or a route that leaves them behind fails
// here. And the configuration reference refuses a variable its source leaves undocumented.
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { configVariables } from '../../docs/generate/configuration.ts';
import { REFERENCES, ROOT } from '../../docs/generate/references.ts';

/** Where two texts first differ, as a person would look for it. */
function firstDifference(checkedIn: string, generated: string): string {
  const [a, b] = [checkedIn.split('\n'), generated.split('\n')];
  const i = a.findIndex((line, n) => line !== b[n]);
  const at = i < 0 ? a.length : i;
  return `line ${at + 1}:\n  checked in: ${a[at] ?? '(end of file)'}\n  generated:  ${b[at] ?? '(end of file)'}`;
}

describe('generated references', () => {
  for (const ref of REFERENCES) {
    it(`${ref.path} is what the code generates`, async () => {
      const generated = await ref.render();
      const checkedIn = await readFile(fileURLToPath(new URL(ref.path, ROOT)), 'utf8').catch(() => '');
      assert.ok(checkedIn === generated, `${ref.path} differs from what the code generates: run \`npm run docs\` and commit the result. First difference at ${firstDifference(checkedIn, generated)}`);
    });
  }

  it('are generated the same way twice', async () => {
    for (const ref of REFERENCES) assert.equal(await ref.render(), await ref.render(), ref.path);
  });
});

describe('configuration reference', () => {
  const source = () => readFile(fileURLToPath(new URL('core/config.ts', ROOT)), 'utf8');

  it('refuses a variable with no comment', async () => {
    const text = (await source()).replace(/\/\*\* Gateway port\. @default 8787 \*\/\n/, '');
    assert.throws(() => configVariables(text), /EMBERS_PORT with a \/\*\* … \*\/ comment/);
  });

  it('refuses a comment whose @default is not the schema\'s', async () => {
    const text = (await source()).replace('Gateway port. @default 8787', 'Gateway port. @default 8080');
    assert.throws(() => configVariables(text), /EMBERS_PORT's comment says @default 8080, its schema 8787/);
  });

  it('refuses a schema default the comment does not state', async () => {
    const text = (await source()).replace('Gateway port. @default 8787', 'Gateway port.');
    assert.throws(() => configVariables(text), /EMBERS_PORT has a default in its schema and no @default/);
  });

  it('states a default that depends on the machine as its rule', () => {
    const wide = configVariables().find((v) => v.name === 'EMBERS_ORT_WIDE_THREADS');
    assert.equal(wide?.defaultText, "the machine's cores");
  });
});
