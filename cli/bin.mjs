#!/usr/bin/env -S node --max-semi-space-size=32
// The `embers` command: the prebuilt CLI (cli/built.mjs), or its TypeScript under tsx where it
// cannot be built. The shebang's V8 flag (also in package.json's `start`, and bench/servers.ts)
// gives the gateway a young generation of up to 2 × 32 MB instead of 2 × 16: fewer scavenges per
// request (docs/decisions/002-request-path-cost.md).
import { builtCli } from './built.mjs';

const entry = process.env.EMBERS_CLI_FROM_SOURCE === '1' ? null : await builtCli();
if (entry) {
  await import(entry);
} else {
  const { register } = await import('tsx/esm/api');
  register();
  await import('./main.ts');
}
