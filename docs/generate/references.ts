// The generated references: where each lives in the repository and what writes it. `npm run docs`
// writes them (docs/generate/main.ts); test/unit/docs-reference.test.ts checks the checked-in
// files are what they would write.
import { cliReference } from './cli.ts';
import { configurationReference } from './configuration.ts';
import { httpApiReference } from './http-api.ts';

export interface Reference {
  /** Relative to the repository's root. */
  path: string;
  render: () => string | Promise<string>;
}

export const REFERENCES: Reference[] = [
  { path: 'docs/reference/configuration.md', render: () => configurationReference() },
  { path: 'docs/reference/cli.md', render: () => cliReference() },
  { path: 'docs/reference/http-api.md', render: () => httpApiReference() },
];

/** The repository's root, where each reference's path starts. */
export const ROOT = new URL('../../', import.meta.url);
