// Loads the shipped ocr function in this process, as the replica would run it from its bundle.
// Its pipeline imports ppocr_keys_v1.txt as text (an esbuild loader in the platform's bundles):
// under plain tsx a module hook has to do the same.
import { register } from 'node:module';
import type { FunctionDefinition } from 'embers';

/** Serves `.txt` URLs as `export default "<file contents>"`; every other URL goes on down the chain. */
const TXT_HOOKS = `
import { readFile } from 'node:fs/promises';
export async function load(url, context, next) {
  if (!url.startsWith('file:') || !url.endsWith('.txt')) return next(url, context);
  const text = await readFile(new URL(url), 'utf8');
  return { format: 'module', source: 'export default ' + JSON.stringify(text) + ';', shortCircuit: true };
}`;

let registered = false;

export type OcrFunction = FunctionDefinition<import('zod').ZodType<{ image: string }>, 'det' | 'rec', unknown>;

export async function loadOcrFunction(): Promise<OcrFunction> {
  if (!registered) {
    register(`data:text/javascript,${encodeURIComponent(TXT_HOOKS)}`);
    registered = true;
  }
  const mod = (await import('../functions/ocr/index.ts')) as { default: OcrFunction };
  return mod.default;
}
