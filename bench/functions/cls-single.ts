// The classifier served one request per inference, batch-1 serving (bench/functions/cls.ts).
import { clsFunction } from './cls.ts';

export default clsFunction('cls-single', 1);
