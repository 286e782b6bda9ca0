import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Hono } from 'hono';
import { FUNCTION_NAME } from '../../core/contracts.ts';
import { DEFAULT_TENANT, findOwned, plainName, qualifiedName } from '../../core/names.ts';
import { ADMIN_AUTH, TENANT_ID, type AuthContext } from '../../core/tenants.ts';
import { onError } from '../../gateway/errors.ts';
import { actingTenant } from '../../gateway/middleware/auth.ts';
import type { GatewayEnv } from '../../gateway/deps.ts';
import { createLogger } from '../../core/log.ts';

describe('function names per tenant', () => {
  it("the default tenant's functions keep their plain name as key; others' are qualified", () => {
    assert.equal(qualifiedName(DEFAULT_TENANT, 'ocr'), 'ocr');
    assert.equal(qualifiedName('t_3f9c00000000', 'ocr'), 't_3f9c00000000.ocr');
    assert.notEqual(qualifiedName('t_a', 'ocr'), qualifiedName('t_b', 'ocr'));
  });

  it('a key gives back the name its tenant knows it by', () => {
    for (const tenant of [DEFAULT_TENANT, 't_3f9c00000000', 'acme-2']) {
      for (const name of ['ocr', 'a', 'x-1-y', 'default']) assert.equal(plainName(qualifiedName(tenant, name)), name);
    }
  });

  it('no two (tenant, name) pairs share a key: "." is in neither alphabet', () => {
    assert.ok(!FUNCTION_NAME.test('a.b') && !TENANT_ID.test('a.b'));
    const tenants = [DEFAULT_TENANT, 't_a', 't_a-b', 'a', 'ab', 'b'];
    const names = ['a', 'b', 'ab', 'a-b', 'default', 't_a'].filter((n) => FUNCTION_NAME.test(n));
    const seen = new Map<string, string>();
    for (const t of tenants) {
      for (const n of names) {
        const key = qualifiedName(t, n);
        assert.equal(seen.get(key), undefined, `${t}/${n} and ${seen.get(key)} share ${key}`);
        seen.set(key, `${t}/${n}`);
      }
    }
  });

  it("finds a tenant's own function, and never another tenant's under the same name", async () => {
    const owners = new Map([
      ['ocr', DEFAULT_TENANT],
      ['t_a.ocr', 't_a'],
      // Deployed by t_b while names were global: its key is the plain name.
      ['old', 't_b'],
    ]);
    const looked: string[] = [];
    const lookup = async (key: string) => {
      looked.push(key);
      const tenant = owners.get(key);
      return tenant ? { tenant } : null;
    };
    assert.deepEqual(await findOwned(DEFAULT_TENANT, 'ocr', lookup), { key: 'ocr', fn: { tenant: DEFAULT_TENANT } });
    assert.deepEqual(await findOwned('t_a', 'ocr', lookup), { key: 't_a.ocr', fn: { tenant: 't_a' } });
    assert.equal(await findOwned('t_c', 'ocr', lookup), null, "the default tenant's ocr is not t_c's");
    assert.deepEqual(await findOwned('t_b', 'old', lookup), { key: 'old', fn: { tenant: 't_b' } });
    assert.equal(await findOwned(DEFAULT_TENANT, 'old', lookup), null, "t_b's old function is not the default tenant's");
    assert.equal(await findOwned('t_a', 'old', lookup), null);
    looked.length = 0;
    await findOwned(DEFAULT_TENANT, 'ghost', lookup);
    assert.deepEqual(looked, ['ghost'], 'the default tenant costs one lookup');
  });

  describe('the acting tenant', () => {
    const tenantFor = async (auth: AuthContext, query = '') => {
      const app = new Hono<GatewayEnv>();
      app.onError(onError(createLogger('test', 'silent')));
      app.use('*', async (c, next) => {
        c.set('auth', auth);
        await next();
      });
      app.get('/', (c) => c.text(actingTenant(c)));
      const res = await app.request(`/${query}`);
      return { status: res.status, body: await res.text() };
    };
    const key: AuthContext = { tenant: 't_a', keyId: 'key_1', scopes: ['run'], admin: false };

    it("is a tenant key's own tenant; naming another is refused whatever the function", async () => {
      assert.deepEqual(await tenantFor(key), { status: 200, body: 't_a' });
      assert.deepEqual(await tenantFor(key, '?tenant=t_a'), { status: 200, body: 't_a' });
      const other = await tenantFor(key, '?tenant=t_b');
      assert.equal(other.status, 403);
      assert.match(other.body, /admin key/);
    });

    it('is the one the admin key names, the default tenant when it names none', async () => {
      assert.deepEqual(await tenantFor(ADMIN_AUTH), { status: 200, body: DEFAULT_TENANT });
      assert.deepEqual(await tenantFor(ADMIN_AUTH, '?tenant=t_b'), { status: 200, body: 't_b' });
      for (const bad of ['', 'T_B', 'a.b', 'x'.repeat(64)]) {
        const r = await tenantFor(ADMIN_AUTH, `?tenant=${bad}`);
        assert.equal(r.status, 400, bad);
        assert.match(r.body, /tenant must be a tenant id/);
      }
    });
  });
});
