// `embers init [dir]`: a project to start from.
import { mkdir, readdir, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Command } from 'commander';
import { CliError } from '../errors.ts';
import { projectFiles } from '../init-template.ts';

const PLATFORM = fileURLToPath(new URL('../..', import.meta.url));

/** The versions this checkout uses, so the project's tools match its own. */
function versions() {
  const pkg = createRequire(import.meta.url)(path.join(PLATFORM, 'package.json')) as { dependencies: Record<string, string>; devDependencies: Record<string, string> };
  return { tsx: pkg.dependencies.tsx, typescript: pkg.devDependencies.typescript, node: pkg.devDependencies['@types/node'] };
}

export function initCommand(): Command {
  return new Command('init')
    .description('write a new project: a function, a test of it (embers/testing), package.json and tsconfig')
    .argument('[dir]', 'where (made if missing; must be empty)', '.')
    .option('--name <name>', 'package name (default: the folder\'s name)')
    .action(async (dir: string, opts: { name?: string }) => {
      const root = path.resolve(dir);
      const existing = await readdir(root).catch((err: NodeJS.ErrnoException) => (err.code === 'ENOENT' ? [] : Promise.reject(err)));
      if (existing.filter((f) => f !== '.git').length) throw new CliError(`${root} is not empty: give a new or empty folder (embers init my-project)`, 2);
      const name = (opts.name ?? path.basename(root)).toLowerCase().replace(/[^a-z0-9._-]+/g, '-').replace(/^[._-]+/, '') || 'embers-project';
      const files = projectFiles({ name, platform: PLATFORM.replace(/\/$/, ''), versions: versions() });
      for (const [file, text] of Object.entries(files)) {
        await mkdir(path.dirname(path.join(root, file)), { recursive: true });
        await writeFile(path.join(root, file), text, { flag: 'wx' });
      }
      const cd = path.relative(process.cwd(), root) || '.';
      process.stdout.write(
        [
          `Wrote ${Object.keys(files).length} files to ${root}:`,
          ...Object.keys(files).map((f) => `  ${f}`),
          '',
          'Next:',
          ...(cd === '.' ? [] : [`  cd ${cd}`]),
          '  npm install          # embers from this checkout, tsx and typescript',
          '  npm test             # runs the function in-process (embers/testing)',
          '  npx embers dev --watch   # the platform locally, redeploying on every change',
          '  npx embers run hello --data \'{"name":"Ada"}\'',
          '',
        ].join('\n'),
      );
    });
}
