// Returns its input: the platform's own overhead, with no model in the way.
import { defineFunction } from 'embers';
import { z } from 'zod';

export default defineFunction({
  name: 'echo',
  input: z.unknown(),
  handler: (input) => input,
});
