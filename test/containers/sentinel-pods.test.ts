// The Kubernetes redis-sentinel component's start script, run for real: three podman pods named as
// the StatefulSet's (redis-0.redis …), each a Redis and a Sentinel sharing the pod's network as a
// Kubernetes pod's containers do, with the component's start.sh and the base's redis.conf. The
// first start makes redis-0 the primary; when it dies a replica is promoted; when it comes back,
// the script asks the Sentinels and starts it as a replica of the new primary.
import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { baseImages, missingTools, REDIS_IMAGE, ROOT, sh, until } from './images.ts';

const skip = await missingTools();
const NET = 'embers-ct-sentinel';
const PASSWORD = 'pods-test-secret';
const PODS = [0, 1, 2].map((i) => `redis-${i}`);
const START = path.join(ROOT, 'infra/k8s/components/redis-sentinel/start.sh');
const CONF = path.join(ROOT, 'infra/k8s/base/redis.conf');

/** redis-cli in `pod`'s Sentinel container: to its Sentinel, or (`redis`: with the password) to a Redis. */
const cli = (pod: string, ...args: string[]) => sh('podman', ['exec', `${pod}-sentinel`, 'redis-cli', ...args]);
const info = (pod: string, host: string) => sh('podman', ['exec', '-e', `REDISCLI_AUTH=${PASSWORD}`, `${pod}-sentinel`, 'redis-cli', '-h', host, 'info', 'replication']);
const primary = async () => (await cli('redis-1', '-p', '26379', '--raw', 'sentinel', 'get-master-addr-by-name', 'embers')).split('\n')[0].trim();
const role = async (host: string) => /^role:(\w+)/m.exec(await info('redis-1', host))?.[1];

function startRedis(pod: string): Promise<string> {
  // Its environment as the StatefulSet's redis container has it (REDISCLI_AUTH: the probe's).
  return sh('podman', ['run', '-d', '--name', `${pod}-redis`, '--pod', pod, '-e', `REDIS_PASSWORD=${PASSWORD}`, '-e', `REDISCLI_AUTH=${PASSWORD}`, '-v', `${START}:/etc/redis-start/start.sh:ro`, '-v', `${CONF}:/etc/redis/redis.conf:ro`, '-v', `${pod}-data:/data`, REDIS_IMAGE, 'sh', '/etc/redis-start/start.sh', 'redis']);
}

async function remove(): Promise<void> {
  for (const pod of PODS) await sh('podman', ['pod', 'rm', '-f', '-t', '2', pod]).catch(() => '');
  for (const pod of PODS) await sh('podman', ['volume', 'rm', '-f', `${pod}-data`]).catch(() => '');
  await sh('podman', ['network', 'rm', '-f', NET]).catch(() => '');
}

before(async () => {
  if (skip) return;
  await baseImages({ log: (line) => process.stderr.write(`# ${line}\n`) });
  await remove();
  await sh('podman', ['network', 'create', NET]);
  for (const pod of PODS) {
    await sh('podman', ['pod', 'create', '--name', pod, '--hostname', pod, '--network', NET, '--network-alias', `${pod}.redis`]);
    await startRedis(pod);
    await sh('podman', ['run', '-d', '--name', `${pod}-sentinel`, '--pod', pod, '-e', `REDIS_PASSWORD=${PASSWORD}`, '-v', `${START}:/etc/redis-start/start.sh:ro`, '--tmpfs', '/sentinel', REDIS_IMAGE, 'sh', '/etc/redis-start/start.sh', 'sentinel']);
  }
});

after(async () => {
  if (!skip && !process.env.EMBERS_KEEP_STACK) await remove();
});

describe('the redis-sentinel component\'s start script (podman pods as its StatefulSet)', { skip }, () => {
  it('starts redis-0 as primary, fails over when it dies, and brings it back as a replica', async () => {
    assert.equal(await until('the Sentinels to name a primary', primary, 60_000), 'redis-0.redis');
    await until('two replicas online', async () => (await info('redis-0', 'redis-0.redis')).match(/^slave\d+:.*state=online/gm)?.length === 2);
    // Every Sentinel knows the other two and both replicas before the primary dies.
    await until('the Sentinels to know each other and the replicas', async () => {
      for (const pod of PODS) {
        const master = (await cli(pod, '-p', '26379', 'sentinel', 'master', 'embers')).split('\n').map((l) => l.trim());
        const field = (k: string) => Number(master[master.indexOf(k) + 1]);
        if (field('num-other-sentinels') !== 2 || field('num-slaves') !== 2) return false;
      }
      return true;
    });

    await sh('podman', ['kill', 'redis-0-redis']);
    // down-after is 5 s; a failover whose leader gives up is tried again after 60 s.
    const promoted = await until('a replica to be promoted', async () => {
      const now = await primary();
      return now !== 'redis-0.redis' && now;
    }, 100_000);
    assert.match(promoted, /^redis-[12]\.redis$/);

    await sh('podman', ['rm', '-f', 'redis-0-redis']);
    await startRedis('redis-0');
    await until('redis-0 to come back as a replica of the new primary', async () => {
      const text = await info('redis-1', 'redis-0.redis');
      return /^role:slave/m.test(text) && new RegExp(`^master_host:${promoted.replace('.', '\\.')}`, 'm').test(text) && /^master_link_status:up/m.test(text);
    });
    assert.equal(await role(promoted), 'master');
  });
});
