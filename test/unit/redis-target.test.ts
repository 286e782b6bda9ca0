import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ConfigError, loadConfig, redisTarget } from '../../core/config.ts';
import { connectionOptions, describeRedis, parseSentinelHosts, redisEnv } from '../../core/redis-target.ts';

const BASE = { EMBERS_API_KEY: 'k'.repeat(16) };

describe('Redis target', () => {
  it('reads Sentinels as host:port lists, IPv6 in brackets, and says what is wrong with a bad one', () => {
    assert.deepEqual(parseSentinelHosts('s1:26379, s2:26380,[::1]:26381'), [
      { host: 's1', port: 26379 },
      { host: 's2', port: 26380 },
      { host: '::1', port: 26381 },
    ]);
    assert.throws(() => parseSentinelHosts('s1'), /"s1" is not host:port/);
    assert.throws(() => parseSentinelHosts('s1:0'), /is not host:port/);
    assert.throws(() => parseSentinelHosts(' , '), /names no Sentinel/);
    assert.throws(() => loadConfig({ ...BASE, EMBERS_REDIS_SENTINELS: 'nope' }), (err: Error) => err instanceof ConfigError && /EMBERS_REDIS_SENTINELS: "nope" is not host:port/.test(err.message));
  });

  it('a URL alone is one Redis with nothing to wait for', () => {
    const t = redisTarget(loadConfig({ ...BASE, EMBERS_REDIS_URL: 'redis://:pw@r:6379' }));
    assert.equal(t.sentinel, undefined);
    assert.equal(t.ackReplicas, 0);
    assert.deepEqual(connectionOptions(t), {});
    assert.equal(describeRedis(t), 'redis://:***@r:6379');
  });

  it('under Sentinel: the primary by name, its credentials, database and TLS from the URL; one replica to wait for', () => {
    const config = loadConfig({ ...BASE, EMBERS_REDIS_SENTINELS: 's1:26379,s2:26379', EMBERS_REDIS_SENTINEL_NAME: 'main', EMBERS_REDIS_URL: 'rediss://app:p%40ss@main/2', EMBERS_REDIS_SENTINEL_PASSWORD: 'sp' });
    const t = redisTarget(config);
    assert.equal(t.ackReplicas, 1);
    const o = connectionOptions(t);
    assert.deepEqual(o.sentinels, [{ host: 's1', port: 26379 }, { host: 's2', port: 26379 }]);
    assert.equal(o.name, 'main');
    assert.equal(o.username, 'app');
    assert.equal(o.password, 'p@ss');
    assert.equal(o.db, 2);
    assert.deepEqual(o.tls, {});
    assert.equal(o.sentinelPassword, 'sp');
    assert.equal(o.failoverDetector, true);
    assert.equal((o.reconnectOnError as (e: Error) => unknown)(new Error("READONLY You can't write against a read only replica.")), 2);
    assert.equal(describeRedis(t), 'primary "main" of Sentinels s1:26379,s2:26379');
    assert.ok(!describeRedis(t).includes('p@ss'));
    // A replica started with the agent's environment gets the same target.
    assert.deepEqual(redisTarget(loadConfig({ ...BASE, ...redisEnv(t) })), t);
  });

  it('a plain target passed on clears Sentinel settings the starter had; waiting can be turned off or up', () => {
    const plain = redisTarget(loadConfig({ ...BASE, EMBERS_REDIS_URL: 'redis://r:6379' }));
    assert.equal(redisTarget(loadConfig({ ...BASE, EMBERS_REDIS_SENTINELS: 's:1', ...redisEnv(plain) })).sentinel, undefined);
    assert.equal(redisTarget(loadConfig({ ...BASE, EMBERS_REDIS_SENTINELS: 's:1', EMBERS_REDIS_ACK_REPLICAS: '0' })).ackReplicas, 0);
    assert.equal(redisTarget(loadConfig({ ...BASE, EMBERS_REDIS_URL: 'redis://r:6379', EMBERS_REDIS_ACK_REPLICAS: '2' })).ackReplicas, 2);
    assert.throws(() => redisTarget(loadConfig(BASE)), /set EMBERS_REDIS_URL or EMBERS_REDIS_SENTINELS/);
  });
});
