// Function secrets and vars on the real platform, run as `npm start` runs it (`embers dev`, in a
// child process whose every log line, its replicas' and their user code's included, is kept):
// the handler reads them as ctx.env, a change rolls the replicas without losing a request in
// flight, another tenant cannot reach them, and the value is nowhere else: not in Redis (any key,
// any type), the data folder (S3's objects, Redis's files, the node's caches), the S3 bucket, the
// logs, any answer, nor any process's arguments or environment.
import assert from 'node:assert/strict';
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { mkdtemp, readFile, readdir, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { EmbersClient } from '../../cli/client.ts';
import { deployFile } from '../../cli/deploy.ts';
import { loadConfig } from '../../core/config.ts';
import { MAX_SECRET_BYTES, MAX_SECRETS_PER_FUNCTION } from '../../core/function-env.ts';
import { createLogger } from '../../core/log.ts';
import { plainTarget } from '../../core/redis-target.ts';
import { keys } from '../../core/keys.ts';
import { createRedis, type Redis } from '../../core/redis.ts';
import { ObjectStore } from '../../core/s3.ts';
import { gatewayOptions } from '../../platform/embedded.ts';
import { startGateway, type RunningGateway } from '../../gateway/server.ts';
import { storeFromConfig } from '../../core/s3.ts';
import { ROOT, eventually, fixture, shipped } from '../helpers/platform.ts';

/** What the fixture answers: digests, never values. */
interface EnvAnswer {
  setup: { length: number; sha256: string } | null;
  handler: { length: number; sha256: string } | null;
  mode: string;
  names: string[];
  version: string;
}

const secretValue = () => `sk-${randomBytes(18).toString('hex')}`;
const FIRST = secretValue();
const SECOND = secretValue();
const SHADOW = secretValue();
const VALUES = [FIRST, SECOND, SHADOW];
const digest = (v: string) => ({ length: v.length, sha256: createHash('sha256').update(v).digest('hex') });

let tmp: string;
let dev: ChildProcess;
let logs = '';
let url: string;
let apiKey: string;
let adminKey: string;
let redisUrl: string;
let s3Endpoint: string;
let redis: Redis;
/** Everything any answer or command printed, to look for the values in at the end. */
const seen: string[] = [];

const call = async (route: string, init: RequestInit = {}, key = apiKey): Promise<{ status: number; text: string }> => {
  const r = await fetch(`${url}${route}`, { ...init, headers: { authorization: `Bearer ${key}`, ...init.headers } });
  const text = await r.text();
  seen.push(text);
  return { status: r.status, text };
};
const put = (fn: string, name: string, value: string | Uint8Array<ArrayBuffer>, key?: string) => call(`/v1/functions/${fn}/secrets/${name}`, { method: 'PUT', body: value, headers: { 'content-type': 'text/plain' } }, key);
const code = (r: { text: string }) => (JSON.parse(r.text) as { error: { code: string } }).error.code;
const run = async (input: object): Promise<EnvAnswer> => {
  const r = await call('/v1/run/env-reader', { method: 'POST', body: JSON.stringify(input), headers: { 'content-type': 'application/json' } });
  assert.equal(r.status, 200, r.text);
  return JSON.parse(r.text) as EnvAnswer;
};

function embers(args: string[], input?: string): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = execFile(process.execPath, [path.join(ROOT, 'cli/bin.mjs'), ...args], { cwd: tmp, env: { ...process.env, EMBERS_URL: url, EMBERS_API_KEY: apiKey }, timeout: 60_000 }, (err, stdout, stderr) => {
      seen.push(stdout, stderr);
      resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr });
    });
    child.stdin!.end(input ?? '');
  });
}

before(async () => {
  tmp = await mkdtemp(path.join(os.tmpdir(), 'embers-secrets-'));
  const env: NodeJS.ProcessEnv = { ...process.env, EMBERS_DATA_DIR: path.join(tmp, 'data'), EMBERS_PORT: '0', EMBERS_LOG_LEVEL: 'debug', EMBERS_LOG_PRETTY: 'false', EMBERS_HEARTBEAT_MS: '200', EMBERS_JOB_LOCK_MS: '2000', EMBERS_SCHEDULER_TICK_MS: '100' };
  for (const k of ['EMBERS_REDIS_URL', 'EMBERS_S3_ENDPOINT', 'EMBERS_API_KEY', 'EMBERS_ADMIN_KEY', 'EMBERS_SECRETS_KEY']) delete env[k];
  dev = spawn(process.execPath, [path.join(ROOT, 'cli/bin.mjs'), 'dev', '--no-deploy'], { cwd: tmp, env, stdio: ['ignore', 'pipe', 'pipe'] });
  dev.stdout!.on('data', (d: Buffer) => (logs += d));
  dev.stderr!.on('data', (d: Buffer) => (logs += d));
  await eventually(async () => logs.includes('Ctrl-C stops everything'), 'embers dev to start', 60_000);
  url = /Embers is running at (\S+)/.exec(logs)![1];
  apiKey = /API key:\s+(\S+)/.exec(logs)![1];
  adminKey = /Admin key:\s+(\S+)/.exec(logs)![1];
  const line = (msg: string) => JSON.parse(logs.split('\n').find((l) => l.includes(`"msg":"${msg}"`))!) as Record<string, string>;
  redisUrl = line('started redis-server').url;
  s3Endpoint = line('started embedded S3 server').endpoint;
  redis = createRedis(redisUrl);
  await deployFile(new EmbersClient({ url, apiKey }), fixture('env-reader.ts'));
});
after(async () => {
  redis?.disconnect();
  if (dev && dev.exitCode === null) {
    dev.kill('SIGTERM');
    await new Promise((r) => dev.once('exit', r));
  }
  await rm(tmp, { recursive: true, force: true });
});

describe('function secrets and vars', () => {
  it('hands the handler its vars, then its secrets once put (piped to the CLI), over a var of the same name', async () => {
    const before = await run({ name: 'API_TOKEN' });
    assert.deepEqual([before.handler, before.setup, before.mode, before.names], [null, null, 'fast', ['MODE', 'SHADOWED']]);
    const shown = await embers(['functions', 'show', 'env-reader']);
    assert.match(shown.stdout, /var MODE="fast"/);

    const cli = await embers(['secrets', 'put', 'env-reader', 'API_TOKEN'], `${FIRST}\n`);
    assert.equal(cli.code, 0, cli.stderr);
    assert.match(cli.stdout, /API_TOKEN set on env-reader; its replicas move to v2/);
    const after = await eventually(async () => {
      const r = await run({ name: 'API_TOKEN' });
      return r.version === 'v2' && r;
    }, 'a replica of v2');
    // The trailing newline of `echo`-style input is not part of the value.
    assert.deepEqual([after.setup, after.handler], [digest(FIRST), digest(FIRST)]);
    assert.deepEqual(after.names, ['API_TOKEN', 'MODE', 'SHADOWED']);

    assert.equal((await put('env-reader', 'SHADOWED', SHADOW)).status, 201);
    const shadowed = await eventually(async () => {
      const r = await run({ name: 'SHADOWED' });
      return r.version === 'v3' && r;
    }, 'a replica of v3');
    assert.deepEqual(shadowed.handler, digest(SHADOW), 'a secret wins over the var of its name');

    const listed = await embers(['secrets', 'list', 'env-reader']);
    assert.match(listed.stdout, /^NAME\s+CREATED\s+UPDATED/);
    assert.match(listed.stdout, /^API_TOKEN\s/m);
    const shownAgain = await embers(['functions', 'show', 'env-reader']);
    assert.match(shownAgain.stdout, /versions: v1, v2 \(secrets changed\), v3 \(secrets changed\)/);
    for (const sub of [[], ['put'], ['list'], ['delete']]) {
      const help = await embers(['secrets', ...sub, '--help']);
      assert.equal(help.code, 0, help.stderr);
      assert.match(help.stdout, /Usage: embers secrets/);
    }
  });

  it('rolls the replicas on a change without losing the request one is running', async () => {
    const slow = run({ name: 'API_TOKEN', sleepMs: 1_500 });
    await eventually(async () => {
      const fn = JSON.parse((await call('/v1/functions/env-reader')).text) as { replicas: { jobs: { active: number } }[] };
      return fn.replicas.some((r) => r.jobs.active > 0);
    }, 'the slow request to be running');
    const changed = await put('env-reader', 'API_TOKEN', SECOND);
    assert.equal(changed.status, 200, changed.text);
    assert.equal((JSON.parse(changed.text) as { version: string }).version, 'v4');
    const held = await slow;
    assert.deepEqual([held.version, held.handler], ['v3', digest(FIRST)], 'answered by the replica it started on, with what it started with');
    const next = await eventually(async () => {
      const r = await run({ name: 'API_TOKEN' });
      return r.version === 'v4' && r;
    }, 'a replica of v4');
    assert.deepEqual([next.setup, next.handler], [digest(SECOND), digest(SECOND)]);

    const deleted = await embers(['secrets', 'delete', 'env-reader', 'API_TOKEN']);
    assert.equal(deleted.code, 0, deleted.stderr);
    const without = await eventually(async () => {
      const r = await run({ name: 'API_TOKEN' });
      return r.version === 'v5' && r;
    }, 'a replica of v5');
    assert.equal(without.handler, null);
  });

  it("refuses bad names, values and counts, and answers another tenant's function as a missing one", async () => {
    assert.equal(code(await put('env-reader', 'lower_case', 'x')), 'invalid_secret_name');
    assert.equal(code(await put('env-reader', '9LIVES', 'x')), 'invalid_secret_name');
    const big = await put('env-reader', 'BIG', new Uint8Array(MAX_SECRET_BYTES + 1).fill(0x61));
    assert.deepEqual([big.status, code(big)], [413, 'too_large']);
    assert.equal(code(await put('env-reader', 'EMPTY', '')), 'invalid_secret');
    assert.equal(code(await put('env-reader', 'BINARY', new Uint8Array([0xff, 0xfe]))), 'invalid_secret');
    assert.equal(code(await put('no-such-fn', 'API_TOKEN', FIRST)), 'function_not_found');
    assert.equal(code(await call('/v1/functions/env-reader/secrets/NEVER_SET', { method: 'DELETE' })), 'secret_not_found');
    const cli = await embers(['secrets', 'put', 'env-reader', 'bad-name'], 'x');
    assert.equal(cli.code, 2);
    assert.match(cli.stderr, /cannot name a secret/);

    // Tenant B: env-reader is the default tenant's; to B it is what a name nobody has is.
    const tenant = JSON.parse((await call('/v1/tenants', { method: 'POST', body: JSON.stringify({ name: 'bravo' }), headers: { 'content-type': 'application/json' } }, adminKey)).text) as { id: string };
    const keyB = (JSON.parse((await call(`/v1/tenants/${tenant.id}/keys`, { method: 'POST', body: '{}', headers: { 'content-type': 'application/json' } }, adminKey)).text) as { key: string }).key;
    const asB = async (fn: string) => {
      const out: string[] = [];
      for (const [route, init] of [[`/v1/functions/${fn}/secrets`, {}], [`/v1/functions/${fn}/secrets/SHADOWED`, { method: 'DELETE' }], [`/v1/functions/${fn}/secrets/SHADOWED`, { method: 'PUT', body: SECOND }]] as [string, RequestInit][]) {
        const r = await call(route, init, keyB);
        out.push(`${r.status} ${r.text.replaceAll(fn, '<fn>')}`);
      }
      return out;
    };
    const foreign = await asB('env-reader');
    assert.deepEqual(foreign, await asB('nobody-has-this'));
    assert.ok(foreign.every((a) => a.startsWith('404 ')), foreign.join('\n'));
    // The admin key acts for a tenant with --tenant, as elsewhere.
    const asAdmin = await embers(['secrets', 'list', 'env-reader', '--tenant', 'default', '--key', adminKey]);
    assert.match(asAdmin.stdout, /^SHADOWED\s/m, asAdmin.stderr);
    assert.equal((await call('/v1/functions/env-reader/secrets')).status, 200);

    // At most MAX_SECRETS_PER_FUNCTION, on a function with no replica running (each put only makes a version).
    await deployFile(new EmbersClient({ url, apiKey }), shipped('echo.ts'));
    for (let i = 0; i < MAX_SECRETS_PER_FUNCTION; i++) assert.equal((await put('echo', `S_${i}`, 'v')).status, 201);
    const tooMany = await put('echo', 'ONE_MORE', 'v');
    assert.deepEqual([tooMany.status, code(tooMany)], [409, 'too_many_secrets']);
    assert.equal((await put('echo', 'S_0', 'replaced')).status, 200, 'replacing one is not one more');
    // Deleting the function deletes its secrets: a function deployed again by that name starts with none.
    assert.equal((await call('/v1/functions/echo', { method: 'DELETE' })).status, 200);
    assert.equal(await redis.exists(keys.secrets('echo')), 0);
  });

  it('answers 503 secrets_not_configured from a gateway without EMBERS_SECRETS_KEY', async () => {
    const config = loadConfig({ ...process.env, EMBERS_DATA_DIR: path.join(tmp, 'keyless'), EMBERS_PORT: '0', EMBERS_SECRETS_KEY: undefined });
    const store = storeFromConfig({ ...config, EMBERS_S3_ENDPOINT: s3Endpoint });
    let gateway: RunningGateway | undefined;
    try {
      gateway = await startGateway(gatewayOptions(config, { redisTarget: plainTarget(redisUrl), store, apiKey, log: createLogger('keyless', 'silent') }));
      const r = await fetch(`${gateway.url}/v1/functions/env-reader/secrets/API_TOKEN`, { method: 'PUT', body: FIRST, headers: { authorization: `Bearer ${apiKey}` } });
      const text = await r.text();
      seen.push(text);
      assert.deepEqual([r.status, code({ text })], [503, 'secrets_not_configured']);
    } finally {
      await gateway?.close();
      store.destroy();
    }
  });

  it('keeps every value out of Redis, S3, the data folder, the logs, every answer and every process', async () => {
    const found = (where: string, text: string) => {
      for (const v of VALUES) for (const form of [v, Buffer.from(v).toString('base64')]) assert.ok(!text.includes(form), `a secret value is in ${where}`);
    };
    // Redis: every key, whatever its type.
    for (const key of await redis.keys('*')) {
      const type = await redis.type(key);
      // Expired since it was listed (BullMQ's short-lived keys, such as a queue's stalled-check).
      if (type === 'none') continue;
      const read: Record<string, () => Promise<unknown>> = {
        string: () => redis.get(key),
        hash: () => redis.hgetall(key),
        list: () => redis.lrange(key, 0, -1),
        set: () => redis.smembers(key),
        zset: () => redis.zrange(key, '0', '-1', 'WITHSCORES'),
        stream: () => redis.xrange(key, '-', '+'),
      };
      assert.ok(read[type], `Redis key ${key} is a ${type}, which this test cannot read`);
      found(`Redis key ${key} (${type})`, `${key} ${JSON.stringify(await read[type]())}`);
    }
    // The S3 bucket's objects, and every file under the data folder (S3's store, Redis's, the caches).
    const store = new ObjectStore({ endpoint: s3Endpoint, bucket: 'embers', credentials: { accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER' } });
    try {
      const objects = await store.list('');
      assert.ok(objects.some((k) => k.endsWith('manifest.json')), 'the bucket was listed');
      for (const k of objects) found(`S3 object ${k}`, (await store.get(k)).toString('latin1'));
    } finally {
      store.destroy();
    }
    for (const file of await readdir(path.join(tmp, 'data'), { recursive: true, withFileTypes: true })) {
      if (file.isFile()) found(`file ${path.join(file.parentPath, file.name)}`, (await readFile(path.join(file.parentPath, file.name))).toString('latin1'));
    }
    // Every process's arguments and environment (the user-code processes' included).
    for (const pid of (await readdir('/proc')).filter((d) => /^\d+$/.test(d))) {
      for (const part of ['cmdline', 'environ']) {
        const text = await readFile(`/proc/${pid}/${part}`, 'latin1').catch(() => '');
        found(`/proc/${pid}/${part}`, text);
      }
    }
    seen.push((await embers(['functions', 'show', 'env-reader', '--json'])).stdout, (await call('/v1/functions')).text, (await call('/metrics', {}, adminKey)).text);
    found('an answer or a command\'s output', seen.join('\n'));
    found('the platform\'s logs', logs);
    assert.match(logs, /replica ready/, "the replicas' lines were captured (and looked through)");
  });
});
