// The fleet section's model-less function (bench/fleet.ts): a small handler, deployed under
// many names, as most functions on a serverless platform are.
import { defineFunction } from 'embers';
import { z } from 'zod';

export default defineFunction({
  name: 'fleet-tiny',
  input: z.object({ n: z.number().int().min(0).max(1_000_000) }),
  handler: ({ n }) => ({ n, squared: n * n }),
});
