// `echo` through one call hop, for the bench's composition section (bench/split.ts): its handler
// calls `echo` with its input and answers what that answers, so echo-call against `echo` is what
// one ctx.call adds (latency at c = 1, CPU per request at c = 32) with no model in the way.
import { defineFunction } from 'embers';
import { z } from 'zod';

export default defineFunction({
  name: 'echo-call',
  input: z.unknown(),
  handler: (input, ctx) => ctx.call('echo', input),
});
