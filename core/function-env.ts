// What a handler reads as `ctx.env`: the function's plain `vars` (from its manifest) and its
// secrets (sealed in Redis, core/secrets.ts), under one set of names and limits. Pure: the
// gateway, the deploy and the replica share these checks.
import { z } from 'zod';

/** Names look like environment variables: upper-case letters, digits and "_", not starting with a digit. */
export const ENV_NAME = /^[A-Z_][A-Z0-9_]{0,127}$/;
export const ENV_NAME_RULE = 'names are 1-128 upper-case letters, digits or "_", not starting with a digit (like API_KEY)';

/** Largest secret value (bytes of UTF-8). */
export const MAX_SECRET_BYTES = 64 * 1024;
/** Most secrets one function holds. */
export const MAX_SECRETS_PER_FUNCTION = 100;
/** Largest var value (characters) and most vars: they ride in every version's manifest. */
export const MAX_VAR_CHARS = 4096;
export const MAX_VARS = 64;

export const EnvName = z.string().regex(ENV_NAME, ENV_NAME_RULE);

export const VarsSchema = z
  .record(EnvName, z.string().max(MAX_VAR_CHARS, `a var's value is at most ${MAX_VAR_CHARS} characters; keep larger settings in a file or a secret`))
  .refine((v) => Object.keys(v).length <= MAX_VARS, { message: `at most ${MAX_VARS} vars` });

/** Why `value` cannot be a secret's value (`too_large` or `invalid_secret`), or null. Never quotes the value. */
export function secretValueProblem(value: Buffer): { code: 'too_large' | 'invalid_secret'; message: string } | null {
  if (value.length > MAX_SECRET_BYTES) return { code: 'too_large', message: `the value is ${value.length} bytes; a secret holds at most ${MAX_SECRET_BYTES}` };
  if (value.length === 0) return { code: 'invalid_secret', message: 'the value is empty' };
  try {
    new TextDecoder('utf-8', { fatal: true }).decode(value);
  } catch {
    return { code: 'invalid_secret', message: 'the value is not UTF-8 text' };
  }
  return null;
}

/**
 * What `ctx.env` holds: vars, then secrets over them (a secret of a var's name wins, so a
 * deployed default can be overridden per deployment without redeploying).
 */
export function mergeEnv(vars: Record<string, string> | undefined, secrets: Record<string, string>): Record<string, string> {
  return { ...vars, ...secrets };
}

/** `ctx.env` as the handler gets it: frozen, with no prototype (`ctx.env.X` is never an inherited member). */
export function envView(env: Record<string, string> | undefined): Readonly<Record<string, string | undefined>> {
  return Object.freeze(Object.assign(Object.create(null) as Record<string, string>, env));
}
