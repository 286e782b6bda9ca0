// ctx.env's pure parts: names, vars, secret values, how vars and secrets merge, and that a sealed
// secret opens only for the function and name it was sealed for.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { Redis } from 'ioredis';
import { DeploySpecSchema } from '../../core/contracts.ts';
import { envView, MAX_SECRET_BYTES, MAX_VARS, mergeEnv, secretValueProblem } from '../../core/function-env.ts';
import { FunctionSecrets, UnopenableSecret } from '../../core/secrets.ts';
import { Sealer } from '../../core/sealed.ts';

const KEY = 'k'.repeat(32);
const spec = (vars: unknown) => DeploySpecSchema.safeParse({ name: 'fn', vars });

describe('function env', () => {
  it('takes vars named like environment variables, with string values, within bounds', () => {
    assert.ok(spec({ MODE: 'fast', _X: '', A1: 'x' }).success);
    assert.deepEqual(DeploySpecSchema.parse({ name: 'fn' }).vars, {}, 'none: an empty set');
    for (const bad of [{ mode: 'fast' }, { '1A': 'x' }, { 'A-B': 'x' }, { A: 1 }, { A: 'x'.repeat(4097) }, Object.fromEntries(Array.from({ length: MAX_VARS + 1 }, (_, i) => [`V${i}`, 'x']))]) {
      assert.equal(spec(bad).success, false, JSON.stringify(bad).slice(0, 80));
    }
  });

  it('refuses secret values that are empty, too large or not UTF-8, without quoting them', () => {
    assert.equal(secretValueProblem(Buffer.from('s3cr3t')), null);
    assert.equal(secretValueProblem(Buffer.alloc(MAX_SECRET_BYTES, 0x61)), null);
    assert.equal(secretValueProblem(Buffer.alloc(MAX_SECRET_BYTES + 1, 0x61))?.code, 'too_large');
    assert.equal(secretValueProblem(Buffer.alloc(0))?.code, 'invalid_secret');
    const binary = secretValueProblem(Buffer.from([0x41, 0xff]));
    assert.equal(binary?.code, 'invalid_secret');
    assert.ok(!binary.message.includes('A'));
  });

  it('lets a secret win over a var of its name, and hands the handler a frozen view with no prototype', () => {
    const env = envView(mergeEnv({ MODE: 'fast', TOKEN: 'var' }, { TOKEN: 'secret' }));
    assert.deepEqual({ ...env }, { MODE: 'fast', TOKEN: 'secret' });
    assert.ok(Object.isFrozen(env));
    assert.equal(env.toString, undefined);
    assert.equal(env.constructor, undefined);
    assert.throws(() => {
      (env as Record<string, string>).MODE = 'slow';
    }, TypeError);
  });

  it('opens a secret only for the function and name it was sealed for, and never says its value', async () => {
    const sealer = new Sealer(KEY, 'secrets');
    const record = (sealed: string) => JSON.stringify({ sealed, createdAt: '', updatedAt: '' });
    const sealed = sealer.seal('the-value', 'secret:t_a.fn:TOKEN');
    const stored = (name: string, s: string) => ({ hgetall: async () => ({ [name]: record(s) }) }) as unknown as Redis;
    assert.deepEqual(await new FunctionSecrets(stored('TOKEN', sealed), sealer).open('t_a.fn'), { TOKEN: 'the-value' });
    // Copied to another tenant's function, or under another name, or opened with another key: refused.
    for (const [fn, name, s] of [['t_b.fn', 'TOKEN', sealer], ['t_a.fn', 'OTHER', sealer], ['t_a.fn', 'TOKEN', new Sealer('x'.repeat(32), 'secrets')]] as const) {
      await assert.rejects(new FunctionSecrets(stored(name, sealed), s).open(fn), (err: Error) => err instanceof UnopenableSecret && err.message.includes(name) && !err.message.includes('the-value'));
    }
    await assert.rejects(new FunctionSecrets(stored('TOKEN', sealed), null).open('t_a.fn'), /no EMBERS_SECRETS_KEY/);
    assert.deepEqual(await new FunctionSecrets({ hgetall: async () => ({}) } as unknown as Redis, null).open('t_a.fn'), {}, 'no secrets: no key needed');
  });
});
