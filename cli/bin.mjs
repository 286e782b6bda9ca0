#!/usr/bin/env -S node --max-semi-space-size=32
// The `embers` command. The CLI is TypeScript; tsx loads it. The shebang's V8 flag (also in
// package.json's `start`, and bench/servers.ts) gives the gateway a young generation of up to
// 2 × 32 MB instead of 2 × 16: fewer scavenges per request (docs/decisions/002-request-path-cost.md).
import { register } from 'tsx/esm/api';

register();
await import('./main.ts');
