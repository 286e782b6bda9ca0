import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { describe, it } from 'node:test';
import { z } from 'zod';
import { ConfigError, loadConfig } from '../../core/config.ts';
import { canAccess, CreateKeySchema, CreateTenantSchema, hashSecret, newSecret, ADMIN_AUTH, type AuthContext } from '../../core/tenants.ts';
import { startGateway, GatewayStartError } from '../../gateway/server.ts';
import { createLogger } from '../../core/log.ts';
import { plainTarget } from '../../core/redis-target.ts';
import { storeFromConfig } from '../../core/s3.ts';

describe('tenant keys', () => {
  it('secrets are emb_ + 32 random bytes, hashed with sha256', () => {
    const a = newSecret();
    assert.match(a, /^emb_[A-Za-z0-9_-]{43}$/);
    assert.notEqual(a, newSecret());
    assert.match(hashSecret(a), /^[0-9a-f]{64}$/);
    assert.equal(hashSecret(a), hashSecret(a));
  });

  it('a tenant key reaches only its own tenant; the admin key reaches all', () => {
    const a: AuthContext = { tenant: 't_a', keyId: 'key_1', scopes: ['run'], admin: false };
    assert.equal(canAccess(a, 't_a'), true);
    assert.equal(canAccess(a, 't_b'), false);
    assert.equal(canAccess(ADMIN_AUTH, 't_b'), true);
  });

  it('admin request bodies are validated with a reason', () => {
    const bad: [unknown, RegExp][] = [
      [{}, /name/],
      [{ name: '   ' }, /name must not be empty/],
      [{ name: 'x'.repeat(101) }, /at most 100/],
      [{ name: 'acme', plan: 'gold' }, /plan/],
      ['acme', /object/],
    ];
    for (const [body, reason] of bad) {
      const r = CreateTenantSchema.safeParse(body);
      assert.equal(r.success, false, JSON.stringify(body));
      assert.match(z.prettifyError(r.error!), reason);
    }
    assert.deepEqual(CreateTenantSchema.parse({ name: ' acme ' }), { name: 'acme' });
    assert.match(z.prettifyError(CreateKeySchema.safeParse({ scopes: ['admin'] }).error!), /scopes are "run", "deploy", "read"/);
    assert.match(z.prettifyError(CreateKeySchema.safeParse({ scopes: [] }).error!), /at least one scope/);
    assert.deepEqual(CreateKeySchema.parse({}), {});
    assert.deepEqual(CreateKeySchema.parse({ name: 'ci', scopes: ['run'] }), { name: 'ci', scopes: ['run'] });
  });
});

describe('tenancy and TLS configuration', () => {
  it('wants both TLS files or neither, naming the missing one', () => {
    assert.throws(() => loadConfig({ EMBERS_TLS_CERT: '/tmp/cert.pem' }), (err: Error) => err instanceof ConfigError && /EMBERS_TLS_KEY: set it too/.test(err.message));
    assert.throws(() => loadConfig({ EMBERS_TLS_KEY: '/tmp/key.pem' }), (err: Error) => err instanceof ConfigError && /EMBERS_TLS_CERT: set it too/.test(err.message));
    assert.equal(loadConfig({ EMBERS_TLS_CERT: 'c.pem', EMBERS_TLS_KEY: 'k.pem' }).EMBERS_TLS_KEY, 'k.pem');
  });

  it('wants an admin key of 16+ characters, not the API key', () => {
    assert.throws(() => loadConfig({ EMBERS_ADMIN_KEY: 'short' }), /EMBERS_ADMIN_KEY: must be at least 16 characters/);
    const same = 'a-key-of-sixteen-characters';
    assert.throws(() => loadConfig({ EMBERS_ADMIN_KEY: same, EMBERS_API_KEY: same }), /EMBERS_ADMIN_KEY: must differ from EMBERS_API_KEY/);
  });

  it('an unreadable or unusable certificate stops the gateway naming the variables', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'embers-tls-'));
    const junk = path.join(dir, 'junk.pem');
    await writeFile(junk, '-----BEGIN CERTIFICATE-----\nnot a certificate\n-----END CERTIFICATE-----\n');
    const store = storeFromConfig({ EMBERS_S3_BUCKET: 'embers' });
    const start = (tls: { certFile: string; keyFile: string }) =>
      startGateway({ redisTarget: plainTarget('redis://127.0.0.1:1'), store, apiKey: 'x'.repeat(16), tls, port: 0, host: '127.0.0.1', log: createLogger('test', 'silent'), maxBodyBytes: 1024, maxBundleBytes: 1024, queueTimeoutMs: 1000 });
    try {
      await assert.rejects(start({ certFile: '/nonexistent/cert.pem', keyFile: junk }), (err: Error) => err instanceof GatewayStartError && /^EMBERS_TLS_CERT: cannot read \/nonexistent\/cert\.pem/.test(err.message));
      await assert.rejects(start({ certFile: junk, keyFile: '/nonexistent/key.pem' }), (err: Error) => err instanceof GatewayStartError && /^EMBERS_TLS_KEY: cannot read/.test(err.message));
      await assert.rejects(start({ certFile: junk, keyFile: junk }), (err: Error) => err instanceof GatewayStartError && /EMBERS_TLS_CERT \/ EMBERS_TLS_KEY .* are not a PEM certificate and its private key/.test(err.message));
    } finally {
      store.destroy();
      await rm(dir, { recursive: true, force: true });
    }
  });
});
