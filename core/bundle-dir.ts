// Bundles keep native modules (onnxruntime-node, sharp) external; wherever a bundle is
// written, a node_modules link to the platform's own makes those imports resolve.
import { lstat, mkdir, symlink } from 'node:fs/promises';
import { createRequire } from 'node:module';
import path from 'node:path';

const require = createRequire(import.meta.url);

export const PLATFORM_NODE_MODULES = path.resolve(path.dirname(require.resolve('onnxruntime-node/package.json')), '..');

export async function linkPlatformModules(dir: string): Promise<void> {
  await mkdir(dir, { recursive: true });
  const link = path.join(dir, 'node_modules');
  if (await lstat(link).catch(() => null)) return;
  await symlink(PLATFORM_NODE_MODULES, link, 'dir').catch((err: NodeJS.ErrnoException) => {
    if (err.code !== 'EEXIST') throw err;
  });
}
