// Child process of `embers deploy`: imports a bundle and prints its manifest as JSON.
// A separate process so a function's top-level code never runs inside the CLI.
import { pathToFileURL } from 'node:url';
import { z } from 'zod';
import { isFunctionDefinition } from '../runtime/sdk.ts';

/** A problem with the function's shape: reported as one line, without a stack. */
class ManifestError extends Error {}

const file = process.argv[2];
try {
  const mod = (await import(pathToFileURL(file).href)) as { default?: unknown };
  const def = mod.default;
  if (!isFunctionDefinition(def)) {
    throw new ManifestError('the file has no default export made with defineFunction() from "embers"');
  }
  if (!def.input || typeof (def.input as z.ZodType).safeParse !== 'function') throw new ManifestError('`input` must be a zod schema');
  if (typeof def.handler !== 'function') throw new ManifestError('`handler` must be a function');
  const inputSchema = z.toJSONSchema(def.input as z.ZodType, { unrepresentable: 'any', io: 'input' });
  process.stdout.write(
    JSON.stringify({
      name: def.name,
      models: def.models ?? {},
      inputSchema,
      batching: def.batching,
      scaling: def.scaling,
      timeoutMs: def.timeoutMs,
      pricing: def.pricing,
      maxQueueLength: def.maxQueueLength,
    }),
  );
} catch (err) {
  // The function's own top-level errors keep their stack: it points into the user's code.
  process.stderr.write(`${err instanceof ManifestError ? err.message : ((err as Error).stack ?? err)}\n`);
  process.exit(1);
}
