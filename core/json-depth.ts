// How deep a caller's JSON nests. Every part that takes a caller's JSON (the gateway's bodies,
// the batch feeder's lines) refuses what nests deeper than EMBERS_MAX_JSON_DEPTH, so nothing that
// later walks it recursively (a schema's validator, JSON.stringify in BullMQ or a replica) can run
// out of stack: a caller's mistake stays a 400, not a 500.

/** EMBERS_MAX_JSON_DEPTH's default: arrays and objects inside each other, the outermost counted. */
export const DEFAULT_MAX_JSON_DEPTH = 128;

/**
 * Whether a parsed JSON value holds more than `max` arrays or objects inside each other. V8's
 * JSON.parse takes any depth without recursion, so this walks the value after it, level by
 * level: it visits containers only (an array of 27k numbers is one loop, a base64 string nothing),
 * 5–10× cheaper here than scanning the text.
 */
export function nestsDeeperThan(value: unknown, max: number): boolean {
  if (typeof value !== 'object' || value === null) return false;
  let level: object[] = [value];
  for (let depth = 1; level.length > 0; depth++) {
    if (depth > max) return true;
    const next: object[] = [];
    for (const v of level) {
      if (Array.isArray(v)) {
        // Indexed: for…of's iterator costs several times more on long arrays of numbers.
        for (let i = 0; i < v.length; i++) {
          const x: unknown = v[i];
          if (typeof x === 'object' && x !== null) next.push(x);
        }
      } else {
        for (const k in v) {
          const x = (v as Record<string, unknown>)[k];
          if (typeof x === 'object' && x !== null) next.push(x);
        }
      }
    }
    level = next;
  }
  return false;
}

/** What a caller is told when its JSON (`what`: "request body", "input") nests deeper than `max`. */
export function tooDeepMessage(what: string, max: number): string {
  return `${what} nests arrays and objects more than ${max} levels deep, past the platform's limit (EMBERS_MAX_JSON_DEPTH); send flatter JSON`;
}
