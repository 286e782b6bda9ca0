// The classifier with dynamic batching: up to 32 requests' inputs in one inference (bench/functions/cls.ts).
import { BATCHED_MAX_BATCH, clsFunction } from './cls.ts';

export default clsFunction('cls-batched', BATCHED_MAX_BATCH);
