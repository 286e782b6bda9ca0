// The platform's version, from its package.json: the CLI's --version, the OpenAPI document's, the protocol's server metadata.
import { readFileSync } from 'node:fs';

export const EMBERS_VERSION = (JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string }).version;
