// The classifier with dynamic batching: up to 32 requests' inputs in one inference (bench/functions/cls.ts).
import { clsFunction } from './cls.ts';

export default clsFunction('cls-batched', 32);
