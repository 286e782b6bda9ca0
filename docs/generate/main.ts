// `npm run docs`: writes every generated reference under docs/reference/ from the code it
// describes (docs/generate/references.ts), and says which changed.
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { REFERENCES, ROOT } from './references.ts';

for (const ref of REFERENCES) {
  const file = fileURLToPath(new URL(ref.path, ROOT));
  const text = await ref.render();
  const before = await readFile(file, 'utf8').catch(() => undefined);
  if (before === text) {
    process.stdout.write(`${ref.path}: unchanged\n`);
    continue;
  }
  await mkdir(path.dirname(file), { recursive: true });
  await writeFile(file, text);
  process.stdout.write(`${ref.path}: ${before === undefined ? 'written' : 'updated'} (${Buffer.byteLength(text)} bytes)\n`);
}
