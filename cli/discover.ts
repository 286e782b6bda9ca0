import { readdir, stat } from 'node:fs/promises';
import path from 'node:path';

/** Function files in a folder laid out like functions/: `name.ts` or `name/index.ts`. */
export async function discoverFunctions(dir: string): Promise<string[]> {
  const found: string[] = [];
  for (const entry of (await readdir(dir, { withFileTypes: true })).sort((a, b) => a.name.localeCompare(b.name))) {
    const full = path.join(dir, entry.name);
    if (entry.isFile() && /\.(ts|mts|js|mjs)$/.test(entry.name) && !/\.(test|d)\.[mc]?[tj]s$/.test(entry.name)) found.push(full);
    else if (entry.isDirectory()) {
      const index = path.join(full, 'index.ts');
      if ((await stat(index).catch(() => null))?.isFile()) found.push(index);
    }
  }
  return found;
}
