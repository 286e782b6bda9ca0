// The usage export on the real platform: records leave Redis for S3 exactly once, across an
// exporter stopped between its files and its commit, exporter processes SIGKILLed mid-export, a
// cursor a failover rolled back, and the lease moving to another agent; GET /v1/usage/export reads them back per tenant; the exported
// records add up to the hourly roll-ups.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { EmbersClient } from '../../cli/client.ts';
import { deployFile } from '../../cli/deploy.ts';
import { usageKeys } from '../../core/keys.ts';
import { createLogger } from '../../core/log.ts';
import { storeFromConfig, type ObjectStore } from '../../core/s3.ts';
import { fileLines } from '../../core/usage-export-files.ts';
import { readUsageExport } from '../../core/usage-export-read.ts';
import type { UsageRecord } from '../../core/usage.ts';
import { UsageExporter } from '../../scheduler/usage-exporter.ts';
import { eventually, fixture, ROOT, shipped, startTestPlatform, tenantWithKey, type TestPlatform } from '../helpers/platform.ts';

describe('usage export', () => {
  let p: TestPlatform;
  let store: ObjectStore;
  let a: { id: string; key: string };
  let b: { id: string; key: string };
  /** Every request made, by tenant: the ids the export must hold, each once. */
  const made = { a: 0, b: 0 };
  const log = createLogger('test', 'error');
  const exporter = (batchRecords = 25) => new UsageExporter({ redis: p.redis(), store, log, intervalMs: 60_000, batchRecords });

  const as = (key: string) => (route: string, init: RequestInit = {}) => p.fetch(route, { ...init, headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', ...init.headers } });
  /** `n` runs of `fn` with the tenant's key, a few at a time. */
  async function run(t: 'a' | 'b', n: number, fn = 'echo', body: unknown = { hi: 1 }): Promise<void> {
    const key = t === 'a' ? a.key : b.key;
    for (let i = 0; i < n; i += 8) {
      await Promise.all(Array.from({ length: Math.min(8, n - i) }, async () => void (await (await as(key)(`/v1/run/${fn}`, { method: 'POST', body: JSON.stringify(body) })).arrayBuffer())));
    }
    made[t] += n;
  }
  /** Records in the stream and in every export file so far, by record id. */
  async function stream(): Promise<UsageRecord[]> {
    return (await p.redis().xrange(usageKeys.records, '-', '+')).map(([, f]) => JSON.parse(f[1]) as UsageRecord);
  }
  async function exported(): Promise<Map<string, string[]>> {
    const where = new Map<string, string[]>();
    for (const key of await store.list('usage/')) {
      for await (const line of fileLines(store, key)) {
        const { id } = JSON.parse(line) as UsageRecord;
        where.set(id, [...(where.get(id) ?? []), key]);
      }
    }
    return where;
  }
  /** Waits for the records of every request made (a lone request's reply goes out just before its record). */
  const recorded = (inStream: number) => eventually(async () => (await p.redis().xlen(usageKeys.records)) === inStream, `${inStream} usage records in the stream`);
  const drain = async (e: UsageExporter) => {
    while ((await e.step()) > 0);
  };
  /** Every id exported exactly once, and the exported ones are exactly `ids`. */
  function once(where: Map<string, string[]>, ids: Set<string>): void {
    const twice = [...where].filter(([, keys]) => keys.length > 1);
    assert.deepEqual(twice, [], 'no record in two files');
    assert.deepEqual([...where.keys()].sort(), [...ids].sort(), 'every record exported, none missing');
  }

  before(async () => {
    // The leader's exporter exports once as it starts leading, then waits: these tests step exporters by hand.
    p = await startTestPlatform({ EMBERS_USAGE_EXPORT_INTERVAL_MS: '3600000' });
    store = storeFromConfig({ EMBERS_S3_ENDPOINT: p.s3Endpoint, EMBERS_S3_BUCKET: 'embers' });
    [a, b] = await Promise.all([tenantWithKey(p, 'acme'), tenantWithKey(p, 'bolt')]);
    await deployFile(new EmbersClient({ url: p.url, apiKey: a.key }), shipped('echo.ts'));
    await deployFile(new EmbersClient({ url: p.url, apiKey: a.key }), fixture('boom.ts'));
    await deployFile(new EmbersClient({ url: p.url, apiKey: b.key }), shipped('echo.ts'));
  });
  after(async () => {
    store?.destroy();
    await p?.close();
  });

  it('finishes a batch whose exporter stopped between its files and its commit: every record in exactly one file', async () => {
    await Promise.all([run('a', 30), run('b', 10)]);
    await recorded(40);
    const ids = new Set((await stream()).map((r) => r.id));
    assert.equal(ids.size, 40);

    const first = exporter();
    const batch = (await first.prepare())!;
    assert.equal(batch.entries, 25);
    assert.ok(batch.written.length > 0);
    // It stops here: its files are in S3, the intent and the records still in Redis.
    assert.ok(await p.redis().exists(usageKeys.exportIntent));
    assert.equal(await p.redis().xlen(usageKeys.records), 40);

    await drain(exporter());
    assert.equal(await first.commit(batch), false, 'the stopped exporter commits nothing once another finished its range');
    once(await exported(), ids);
    assert.equal(await p.redis().xlen(usageKeys.records), 0, 'the stream is trimmed after export');
    assert.equal(await p.redis().exists(usageKeys.exportIntent), 0);
  });

  it('exports no record twice after a failover rolled the cursor back', async () => {
    const before = new Set((await exported()).keys());
    await run('a', 10);
    await recorded(10);
    const entries = await p.redis().xrange(usageKeys.records, '-', '+');
    const cursor = (await p.redis().get(usageKeys.exportCursor))!;
    await drain(exporter());
    // A replica that had not seen that export: the old cursor, the records back in the stream.
    await p.redis().del(usageKeys.records);
    for (const [id, fields] of entries) await p.redis().xadd(usageKeys.records, id, ...fields);
    await p.redis().set(usageKeys.exportCursor, cursor);
    await run('a', 5);
    await recorded(15);
    const ids = new Set([...before, ...(await stream()).map((r) => r.id)]);
    await drain(exporter(4));
    once(await exported(), ids);
    assert.equal(await p.redis().xlen(usageKeys.records), 0);
  });

  it('reads a tenant its own records, from S3 and from what Redis still holds, each once, in time order', async () => {
    await run('a', 4);
    await recorded(4);
    const day = new Date().toISOString().slice(0, 10);
    const range = `from=${day}&to=${new Date(Date.now() + 86_400_000).toISOString().slice(0, 10)}`;
    const lines = async (res: Response) => {
      assert.equal(res.status, 200, await res.clone().text());
      assert.equal(res.headers.get('content-type'), 'application/x-ndjson');
      return (await res.text()).split('\n').filter(Boolean).map((l) => JSON.parse(l) as UsageRecord);
    };
    const ofA = await lines(await as(a.key)(`/v1/usage/export?${range}`));
    assert.equal(ofA.length, made.a);
    assert.equal(new Set(ofA.map((r) => r.id)).size, made.a, 'no duplicates');
    assert.ok(ofA.every((r) => r.tenant === a.id));
    assert.deepEqual(ofA.map((r) => r.at), ofA.map((r) => r.at).sort(), 'in time order');
    const inRedis = (await stream()).map((r) => r.id);
    assert.ok(inRedis.every((id) => ofA.some((r) => r.id === id)), 'the records not exported yet are read too');

    const ofB = await lines(await as(b.key)(`/v1/usage/export?${range}`));
    assert.equal(ofB.length, made.b);
    assert.ok(ofB.every((r) => r.tenant === b.id));
    assert.equal((await as(b.key)(`/v1/usage/export?${range}&tenant=${a.id}`)).status, 403);
    const byAdmin = await lines(await as(p.adminKey)(`/v1/usage/export?${range}&tenant=${a.id}`));
    assert.deepEqual(byAdmin.map((r) => r.id).sort(), ofA.map((r) => r.id).sort());

    for (const bad of [`from=${day}&to=2020-01-01`, 'from=2026-01-01&to=2026-06-01', `${range}&since=2026-01-01`, `to=${day}`, 'from=yesterday&to=today']) {
      assert.equal((await as(a.key)(`/v1/usage/export?${bad}`)).status, 400, bad);
    }

    // The CLI writes the same lines to a file.
    const out = path.join(p.dataDir, 'usage.jsonl');
    const cli = await new Promise<{ code: number; stderr: string }>((resolve) =>
      execFile(process.execPath, [path.join(ROOT, 'cli/bin.mjs'), 'usage', 'export', '--from', day, '--to', range.split('to=')[1], '--out', out], { env: { ...process.env, EMBERS_URL: p.url, EMBERS_API_KEY: a.key }, timeout: 30_000 }, (err, _stdout, stderr) =>
        resolve({ code: err ? 1 : 0, stderr }),
      ),
    );
    assert.equal(cli.code, 0, cli.stderr);
    assert.match(cli.stderr, new RegExp(`exported ${made.a} usage records`));
    assert.equal((await readFile(out, 'utf8')).split('\n').filter(Boolean).length, made.a);
  });

  it('loses no record to an export that commits while a read is under way', async () => {
    await run('a', 5);
    await recorded(9);
    // The read's first listing of S3 waits for an exporter to take everything out of Redis.
    let exportedMidway = false;
    const racing = Object.create(store, {
      list: {
        value: async (prefix: string) => {
          if (!exportedMidway) {
            exportedMidway = true;
            await drain(exporter());
          }
          return store.list(prefix);
        },
      },
    }) as ObjectStore;
    const ids: string[] = [];
    for await (const line of readUsageExport(p.redis(), racing, { tenant: a.id, fromMs: Date.now() - 86_400_000, toMs: Date.now() + 3_600_000 })) ids.push((JSON.parse(line) as UsageRecord).id);
    assert.ok(exportedMidway);
    assert.equal(await p.redis().xlen(usageKeys.records), 0);
    assert.equal(ids.length, made.a);
    assert.equal(new Set(ids).size, made.a);
  });

  it('adds up to the hourly roll-ups: requests, errors, compute seconds and bytes per function and hour', async () => {
    await run('a', 3, 'boom', { mode: 'throw' });
    await run('a', 2, 'boom', { mode: 'reject' });
    await run('a', 3, 'boom', { mode: 'ok' });
    await recorded(8);
    await drain(exporter());
    const from = new Date(Date.now() - 86_400_000).toISOString();
    const to = new Date(Date.now() + 3_600_000).toISOString();
    const records = (await (await as(a.key)(`/v1/usage/export?from=${from}&to=${to}`)).text()).split('\n').filter(Boolean).map((l) => JSON.parse(l) as UsageRecord);
    const sums = new Map<string, { requests: number; errors: number; computeSeconds: number; bytesIn: number; bytesOut: number }>();
    for (const r of records) {
      const k = `${r.fn.split('.').pop()} ${r.at.slice(0, 13)}`;
      const s = sums.get(k) ?? { requests: 0, errors: 0, computeSeconds: 0, bytesIn: 0, bytesOut: 0 };
      s.requests += 1;
      s.errors += r.status >= 400 ? 1 : 0;
      s.computeSeconds += r.computeMs / 1000;
      s.bytesIn += r.bytesIn;
      s.bytesOut += r.bytesOut;
      sums.set(k, s);
    }
    const rows = ((await (await as(a.key)(`/v1/usage?granularity=hour&from=${from}&to=${to}`)).json()) as { data: { function: string; period: string; requests: number; errors: number; computeSeconds: number; bytesIn: number; bytesOut: number }[] }).data;
    assert.deepEqual(rows.map((r) => `${r.function} ${r.period.slice(0, 13)}`).sort(), [...sums.keys()].sort());
    for (const row of rows) {
      const s = sums.get(`${row.function} ${row.period.slice(0, 13)}`)!;
      assert.deepEqual([row.requests, row.errors, row.bytesIn, row.bytesOut], [s.requests, s.errors, s.bytesIn, s.bytesOut], `${row.function} ${row.period}`);
      assert.ok(Math.abs(row.computeSeconds - s.computeSeconds) < 1e-6, `${row.function} ${row.period}: compute ${row.computeSeconds} vs ${s.computeSeconds}`);
    }
    assert.ok(sums.get(`boom ${records.find((r) => r.fn.endsWith('boom'))!.at.slice(0, 13)}`)!.errors >= 5);
  });

  it('loses and repeats nothing when exporter processes are SIGKILLed in the middle of exports', async () => {
    await Promise.all([run('a', 300), run('b', 150)]);
    await recorded(450);
    const ids = new Set([...(await exported()).keys(), ...(await stream()).map((r) => r.id)]);
    const redis = p.redis();
    let midway = 0;
    for (let attempt = 0; attempt < 8 && midway < 3; attempt++) {
      const child = spawn(process.execPath, ['--import', 'tsx', path.join(ROOT, 'test/helpers/usage-exporter-process.ts')], {
        cwd: ROOT,
        env: { ...process.env, EMBERS_REDIS_URL: p.redisUrl, EMBERS_S3_ENDPOINT: p.s3Endpoint!, EXPORT_BATCH: '10' },
        stdio: ['ignore', 'ignore', 'inherit'],
      });
      const exited = new Promise((r) => child.once('exit', r));
      // Killed once it has committed a batch and recorded the next one's intent: that batch's
      // files are about to be written, being written, or written and not committed (mostly the
      // first: the window after the files is one round trip, which the prepare/commit test covers).
      const [startCursor, startIntent] = await redis.mget(usageKeys.exportCursor, usageKeys.exportIntent);
      let intent: string | null = null;
      const until = Date.now() + 60_000;
      while (child.exitCode === null && child.signalCode === null && Date.now() < until) {
        const [cursor, now] = await redis.mget(usageKeys.exportCursor, usageKeys.exportIntent);
        if (cursor !== startCursor && now !== null && now !== startIntent) {
          intent = now;
          break;
        }
        await new Promise((r) => setTimeout(r, 1));
      }
      child.kill('SIGKILL');
      await exited;
      // Its commit did not land before the kill: the next exporter takes that intent up again.
      if (intent !== null && (await redis.get(usageKeys.exportIntent)) === intent) midway++;
    }
    assert.ok(midway >= 1, 'at least one exporter killed between its intent and its commit');
    assert.ok((await redis.xlen(usageKeys.records)) > 0, 'records were left for the next exporter');
    await drain(exporter());
    once(await exported(), ids);
    assert.equal(await redis.xlen(usageKeys.records), 0);
  });

  it('is exported by whichever agent leads: a new one after a restart takes the records waiting', async () => {
    // Last: the restarted gateway knows no admin key.
    await run('b', 6);
    await recorded(6);
    const ids = new Set([...(await exported()).keys(), ...(await stream()).map((r) => r.id)]);
    await p.restart();
    await eventually(async () => (await p.redis().xlen(usageKeys.records)) === 0, 'the new leader exporting');
    once(await exported(), ids);
  });
});
