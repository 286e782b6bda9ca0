// The project `embers init` writes: a function, a test of it, and what runs them.

/** The files of a new project, by path. `platform` is this Embers checkout (its dependency). */
export function projectFiles(o: { name: string; platform: string; versions: { tsx: string; typescript: string; node: string } }): Record<string, string> {
  const json = (v: unknown) => `${JSON.stringify(v, null, 2)}\n`;
  return {
    'package.json': json({
      name: o.name,
      private: true,
      type: 'module',
      scripts: {
        dev: 'embers dev --watch',
        deploy: 'embers deploy functions/hello.ts',
        test: 'node --import tsx --test test/*.test.ts',
        typecheck: 'tsc --noEmit',
      },
      // Embers is self-hosted: the project uses the checkout that made it.
      dependencies: { embers: `file:${o.platform}` },
      devDependencies: { tsx: o.versions.tsx, typescript: o.versions.typescript, '@types/node': o.versions.node },
    }),
    'tsconfig.json': json({
      compilerOptions: { target: 'es2022', module: 'nodenext', moduleResolution: 'nodenext', strict: true, noEmit: true, allowImportingTsExtensions: true, skipLibCheck: true },
      include: ['functions', 'test'],
    }),
    '.gitignore': 'node_modules/\n.embers/\n',
    'functions/hello.ts': `import { defineFunction, z } from 'embers';

// POST /v1/run/hello with {"name": "…"}; anything else is answered 400 before this runs.
export default defineFunction({
  name: 'hello',
  input: z.object({ name: z.string().min(1).max(100) }),
  handler: ({ name }, ctx) => {
    ctx.log.info({ name }, 'greeting');
    return { greeting: \`hello, \${name}\` };
  },
});
`,
    'test/hello.test.ts': `import assert from 'node:assert/strict';
import { after, it } from 'node:test';
import { close, invoke } from 'embers/testing';

// invoke runs the function here as a replica would: input checked, models real, no platform needed.
const hello = new URL('../functions/hello.ts', import.meta.url);
after(close);

it('greets by name', async () => {
  const r = await invoke(hello, { name: 'Ada' });
  assert.equal(r.status, 200);
  assert.deepEqual(r.output, { greeting: 'hello, Ada' });
});

it('refuses a request without a name', async () => {
  const r = await invoke(hello, {});
  assert.equal(r.status, 400);
  assert.equal(r.error?.code, 'invalid_input');
});
`,
  };
}
