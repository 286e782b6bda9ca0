#!/usr/bin/env node
// The `embers` command. The CLI is TypeScript; tsx loads it.
import { register } from 'tsx/esm/api';

register();
await import('./main.ts');
