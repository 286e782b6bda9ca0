// The images and the compose stack, built and run for real with podman (`npm run test:containers`;
// not part of `npm test`: it builds images). The base images come from debootstrap and the npm
// registry (images.ts), the embers image from the repository as it is; compose.test.yaml swaps
// MinIO, which cannot be had here, for s3rver. From the host, through the published gateway
// port: a function with a model is deployed with the CLI, run sync, async and as a batch, seen at
// zero and back, its user code sandboxed inside the agent's container; then the stack goes down
// and up again and keeps what it had (Redis's AOF volume, the S3 volume).
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import path from 'node:path';
import { promisify } from 'node:util';
import { after, before, describe, it } from 'node:test';
import { freePort } from '../../platform/ports.ts';
import { SANDBOX_UID_BASE } from '../../runtime/replica/sandbox.ts';
import { baseImages, buildEmbers, EMBERS_IMAGE, imageBytes, missingTools, ROOT, sh, until } from './images.ts';

const skip = await missingTools();
const PROJECT = 'embers-ct';
const SERVICES = ['redis', 's3', 'gateway-1', 'gateway-2', 'agent'];
const FILES = ['-f', 'infra/docker/compose.yaml', '-f', 'test/containers/compose.test.yaml'];
const MiB = 2 ** 20;

let env: Record<string, string>;
let url: string;
const figures: Record<string, string> = {};

const compose = (...args: string[]) => sh('podman-compose', ['-p', PROJECT, ...FILES, ...args], { env });
const api = (route: string, init: RequestInit = {}) =>
  fetch(`${url}${route}`, { ...init, headers: { authorization: `Bearer ${env.EMBERS_API_KEY}`, 'content-type': 'application/json', ...init.headers } });
const cli = (...args: string[]) => promisify(execFile)(process.execPath, [path.join(ROOT, 'cli/bin.mjs'), ...args], { cwd: ROOT, env: { ...process.env, EMBERS_URL: url, EMBERS_API_KEY: env.EMBERS_API_KEY } });

/** podman runs healthchecks from systemd timers; without systemd the test runs them itself. */
async function healthy(): Promise<number> {
  const t0 = Date.now();
  for (const service of ['redis', 'gateway-1', 'gateway-2']) {
    await until(`${service}'s healthcheck`, () => sh('podman', ['healthcheck', 'run', `${PROJECT}_${service}_1`]).then(() => true), 180_000);
  }
  return Date.now() - t0;
}

async function removeStack(): Promise<void> {
  const ids = (await sh('podman', ['ps', '-aq', '--filter', `label=io.podman.compose.project=${PROJECT}`])).split('\n').filter(Boolean);
  if (ids.length) await sh('podman', ['rm', '-f', '-t', '5', ...ids]);
  const volumes = (await sh('podman', ['volume', 'ls', '-q', '--filter', `label=io.podman.compose.project=${PROJECT}`])).split('\n').filter(Boolean);
  if (volumes.length) await sh('podman', ['volume', 'rm', '-f', ...volumes]);
}

before(async () => {
  if (skip) return;
  let t0 = Date.now();
  await baseImages({ log: (line) => process.stderr.write(`# ${line}\n`) });
  figures['base images'] = `${((Date.now() - t0) / 1000).toFixed(0)} s (0 when kept from an earlier run)`;
  t0 = Date.now();
  await buildEmbers('cpu');
  // Each change of the repository leaves the previous build's image behind, untagged.
  await sh('podman', ['image', 'prune', '-f']);
  figures['cpu image build'] = `${((Date.now() - t0) / 1000).toFixed(0)} s`;
  figures['cpu image size'] = `${Math.round((await imageBytes(EMBERS_IMAGE)) / MiB)} MiB`;
  const ports = { REDIS_PUBLISHED_PORT: await freePort(), S3_PUBLISHED_PORT: await freePort(), GATEWAY_1_PUBLISHED_PORT: await freePort(), GATEWAY_2_PUBLISHED_PORT: await freePort() };
  const redisPassword = randomBytes(16).toString('hex');
  env = {
    ...Object.fromEntries(Object.entries(ports).map(([k, v]) => [k, String(v)])),
    EMBERS_IMAGE,
    REDIS_PASSWORD: redisPassword,
    EMBERS_REDIS_URL: `redis://:${redisPassword}@redis:6379`,
    S3_ACCESS_KEY: 'S3RVER',
    S3_SECRET_KEY: 'S3RVER',
    EMBERS_API_KEY: `emb_${randomBytes(16).toString('hex')}`,
    EMBERS_ADMIN_KEY: `emb_${randomBytes(16).toString('hex')}`,
    EMBERS_SECRETS_KEY: randomBytes(32).toString('base64'),
    EMBERS_PUBLIC_URL: `http://127.0.0.1:${ports.GATEWAY_1_PUBLISHED_PORT}`,
  };
  url = env.EMBERS_PUBLIC_URL;
  await removeStack();
  t0 = Date.now();
  await compose('up', '-d', ...SERVICES);
  await healthy();
  figures['up to healthy'] = `${((Date.now() - t0) / 1000).toFixed(0)} s`;
});

after(async () => {
  if (skip) return;
  for (const [k, v] of Object.entries(figures)) process.stderr.write(`# ${k}: ${v}\n`);
  if (!process.env.EMBERS_KEEP_STACK) await removeStack().catch(() => {});
});

describe('containers, for real (podman)', { skip }, () => {
  let job = '';

  it('serves a function with a model deployed from the host: sync, async and a batch, sandboxed inside the agent', async () => {
    type Readiness = { ok: boolean; sandbox: { nodes: { isolates: boolean; missing: string[] }[] } };
    // Healthy gateways may answer before the agent has said what it can enforce.
    const ready = await until('the agent to report', async () => {
      const r = (await (await fetch(`${url}/readyz`)).json()) as Readiness;
      return r.sandbox.nodes.length > 0 && r;
    });
    assert.equal(ready.ok, true);
    assert.deepEqual(ready.sandbox.nodes.map((n) => [n.isolates, n.missing]), [[true, []]], 'the agent sandboxes user code inside its container');

    await cli('deploy', 'test/fixtures/functions/contained.ts');
    const sync = await api('/v1/run/contained', { method: 'POST', body: '{"i":1}' });
    assert.equal(sync.status, 200, await sync.clone().text());
    const answer = (await sync.json()) as { i: number; angle: string; uid: number; network: string };
    assert.ok(['0', '180'].includes(answer.angle));
    assert.ok(answer.uid >= SANDBOX_UID_BASE, `the handler ran as a sandbox uid, not ${answer.uid}`);
    assert.equal(answer.network, 'unreachable', 'the sandbox has no network, inside the container too');

    const accepted = await api('/v1/run/contained', { method: 'POST', body: '{"i":2}', headers: { prefer: 'respond-async' } });
    assert.equal(accepted.status, 202);
    job = ((await accepted.json()) as { id: string }).id;
    await until('the async job', async () => ((await (await api(`/v1/jobs/${job}`)).json()) as { status: string }).status === 'succeeded');

    const lines = Array.from({ length: 20 }, (_, i) => JSON.stringify({ custom_id: `l${i}`, input: { i } })).join('\n');
    const created = await api('/v1/batches?function=contained', { method: 'POST', body: lines, headers: { 'content-type': 'application/jsonl' } });
    assert.equal(created.status, 201, await created.clone().text());
    const batch = ((await created.json()) as { id: string }).id;
    const done = await until('the batch', async () => {
      const b = (await (await api(`/v1/batches/${batch}`)).json()) as { status: string; request_counts: { completed: number } };
      return b.status === 'completed' && b;
    });
    assert.equal(done.request_counts.completed, 20);
  });

  it('goes to zero when idle and comes back on the next request', async () => {
    const replicas = async () => ((await (await api('/v1/functions/contained')).json()) as { replicas: unknown[] }).replicas.length;
    await until('contained to go to zero', async () => (await replicas()) === 0, 90_000);
    const res = await api('/v1/run/contained', { method: 'POST', body: '{"i":3}' });
    assert.equal(res.status, 200);
    assert.ok(res.headers.get('embers-cold-start'), 'the request waited for a cold start');
    figures['cold start in the container'] = res.headers.get('embers-cold-start')!;
  });

  it('keeps its functions, jobs and models across `podman-compose down` and up', async () => {
    await compose('down');
    const t0 = Date.now();
    await compose('up', '-d', ...SERVICES);
    await healthy();
    figures['restart to healthy'] = `${((Date.now() - t0) / 1000).toFixed(0)} s`;
    const kept = (await (await api(`/v1/jobs/${job}`)).json()) as { status: string; output?: { i: number } };
    assert.equal(kept.status, 'succeeded');
    assert.equal(kept.output?.i, 2);
    const again = await until('a run after the restart', async () => {
      const r = await api('/v1/run/contained', { method: 'POST', body: '{"i":4}' });
      return r.status === 200 && r;
    });
    assert.equal(((await again.json()) as { i: number }).i, 4);
  });

  it('builds the gpu target up to the CUDA libraries, which need NVIDIA\'s repository', async () => {
    const t0 = Date.now();
    const out = await buildEmbers('gpu', 'localhost/embers:gpu-test').then(
      (o) => ({ ok: true, o }),
      (err: Error) => ({ ok: false, o: err.message }),
    );
    figures['gpu build'] = `${out.ok ? 'built' : 'stopped at the CUDA keyring download'} after ${((Date.now() - t0) / 1000).toFixed(0)} s`;
    // Reached offline or not: every step before it is the cpu image's, already built.
    if (!out.ok) assert.match(out.o, /developer\.download\.nvidia\.com|cuda-keyring/, out.o);
  });
});
