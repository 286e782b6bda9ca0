// Redis failover on real Sentinels: a primary, a replica and three Sentinels (redis-server
// --sentinel, down-after 2 s) under a gateway and two node agents with mixed load (sync echo,
// async jobs, a batch). The primary is killed with -9, twice (over, then back): every async job
// accepted succeeds with one outcome, every batch line has one, sync requests are refused only
// inside the failover window, and the platform serves normally after.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { findRedisServer } from '../../platform/local-redis.ts';
import { usageKeys } from '../../core/keys.ts';
import { eventually, fixture, shipped, startTestPlatform, type TestPlatform } from '../helpers/platform.ts';
import { startSentinelGroup, type SentinelGroupUnderTest } from '../helpers/sentinels.ts';

/** Sentinel as it is here: redis-server 6.2 or later runs it (`--sentinel`). */
function sentinelMissing(): string | false {
  try {
    const version = /v=(\d+)\.(\d+)/.exec(execFileSync(findRedisServer(), ['--version'], { encoding: 'utf8' }));
    if (!version || Number(version[1]) * 100 + Number(version[2]) < 602) return `redis-server ${version?.[1]}.${version?.[2]} is older than 6.2`;
    return false;
  } catch (err) {
    return `no redis-server to run Sentinels with: ${(err as Error).message}`;
  }
}
const skip = sentinelMissing();

let p: TestPlatform;
let group: SentinelGroupUnderTest;
let tmp: string;

before(async () => {
  if (skip) return;
  tmp = await mkdtemp(path.join(os.tmpdir(), 'embers-sentinel-'));
  group = await startSentinelGroup(tmp);
  // Short locks: a request held by a replica whose answer a failover lost is taken back soon.
  p = await startTestPlatform({ ...group.env, EMBERS_NODE_SLOTS: '3', EMBERS_SCHEDULER_TICK_MS: '200' });
  await p.startAgent();
  for (const file of [shipped('echo.ts'), fixture('sleepy.ts')]) await p.deploy(file);
});
after(async () => {
  await p?.close();
  await group?.stop();
  if (tmp) await rm(tmp, { recursive: true, force: true });
});

interface Sent {
  at: number;
  kind: 'sync' | 'async';
  status: number;
  job?: string;
}

/** Sync echo (two callers) and async echo (one) until stopped, every outcome recorded. */
function load() {
  const sent: Sent[] = [];
  let on = true;
  const pause = () => new Promise((r) => setTimeout(r, 25));
  const caller = async (kind: Sent['kind']) => {
    for (let i = 0; on; i++) {
      const at = Date.now();
      const headers: Record<string, string> = { 'content-type': 'application/json', ...(kind === 'async' ? { prefer: 'respond-async' } : {}) };
      const res = await p.fetch('/v1/run/echo', { method: 'POST', headers, body: JSON.stringify({ i, kind }), signal: AbortSignal.timeout(30_000) }).catch(() => undefined);
      const body = res ? ((await res.json().catch(() => ({}))) as { id?: string }) : {};
      sent.push({ at, kind, status: res?.status ?? 0, ...(res?.status === 202 ? { job: body.id } : {}) });
      await pause();
    }
  };
  const callers = [caller('sync'), caller('sync'), caller('async')];
  return {
    sent,
    async stop() {
      on = false;
      await Promise.all(callers);
    },
  };
}

const sync = () => p.fetch('/v1/run/echo', { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"after":true}' });

async function jobsSucceeded(sent: Sent[]): Promise<number> {
  const jobs = sent.filter((s) => s.job).map((s) => s.job!);
  for (const id of jobs) {
    const job = await eventually(async () => {
      const j = (await (await p.fetch(`/v1/jobs/${id}`)).json()) as { status: string };
      return ['succeeded', 'failed', 'canceled'].includes(j.status) ? j : null;
    }, `job ${id} to finish`, 60_000);
    assert.equal(job.status, 'succeeded', `job ${id}`);
  }
  return jobs.length;
}

/** Kills the primary under load; returns when the platform serves sync requests from the new one. */
async function failOver(): Promise<{ killedAt: number; primary: number; sent: Sent[] }> {
  const old = await group.primary();
  assert.equal((await sync()).status, 200, 'echo is warm before the load begins');
  const running = load();
  await new Promise((r) => setTimeout(r, 2_000));
  const killedAt = Date.now();
  group.kill(old);
  const primary = await group.failedOverFrom(old);
  await eventually(async () => (await sync()).status === 200, 'a sync run after the failover', 30_000);
  await new Promise((r) => setTimeout(r, 2_000));
  await running.stop();
  // Back to two data servers: the old primary returns as a replica of the new one, and async
  // runs are accepted again.
  await group.revive(old);
  await group.replicasOnline(1);
  const sent = running.sent;
  for (let i = 0; i < 10; i++) {
    const res = await p.fetch('/v1/run/echo', { method: 'POST', headers: { 'content-type': 'application/json', prefer: 'respond-async' }, body: JSON.stringify({ after: i }) });
    assert.equal(res.status, 202, await res.clone().text());
    sent.push({ at: Date.now(), kind: 'async', status: 202, job: ((await res.json()) as { id: string }).id });
  }
  return { killedAt, primary, sent };
}

function checkRefusals(sent: Sent[], killedAt: number, report: (line: string) => void) {
  const refused = sent.filter((s) => s.kind === 'sync' && s.status !== 200);
  const count = (kind: Sent['kind']) => {
    const by = new Map<number, number>();
    for (const s of sent) if (s.kind === kind) by.set(s.status, (by.get(s.status) ?? 0) + 1);
    return [...by].map(([status, n]) => `${status}: ${n}`).join(', ');
  };
  report(`sync ${count('sync')}; async ${count('async')}; sync refused from ${Math.min(...refused.map((r) => r.at)) - killedAt} to ${Math.max(...refused.map((r) => r.at)) - killedAt} ms after the kill`);
  for (const r of refused) assert.ok(r.at >= killedAt - 1_000, `a sync request refused ${killedAt - r.at} ms before the kill (${r.status})`);
  const last = Math.max(killedAt, ...refused.map((r) => r.at));
  assert.ok(last - killedAt <= 10_000, `sync requests refused for ${last - killedAt} ms after the kill`);
  for (const r of refused) assert.ok([0, 503].includes(r.status), `a refusal is a 503 (or no answer while the gateway's own connection moved): ${r.status}`);
  assert.ok(sent.some((s) => s.kind === 'sync' && s.status === 200 && s.at > last), 'sync runs answered after the window');
}

describe('Redis failover on real Sentinels', { skip }, () => {
  it('loses no accepted async job or batch line, refuses sync runs only inside the window, and fails back too', async (t) => {
    const batchLines = Array.from({ length: 300 }, (_, i) => JSON.stringify({ custom_id: `b${i}`, input: { ms: 30, tag: `b${i}` } })).join('\n');
    const created = await p.fetch('/v1/batches?function=sleepy', { method: 'POST', body: batchLines, headers: { 'content-type': 'application/jsonl' } });
    assert.equal(created.status, 201, await created.clone().text());
    const batch = (await created.json()) as { id: string };

    const first = await failOver();
    checkRefusals(first.sent, first.killedAt, (line) => t.diagnostic(`first failover: ${line}`));
    const accepted = await jobsSucceeded(first.sent);
    assert.ok(accepted > 10, `async jobs were accepted before and after (${accepted})`);

    const done = await eventually(async () => {
      const b = (await (await p.fetch(`/v1/batches/${batch.id}`)).json()) as { status: string; request_counts: { total: number; completed: number; failed: number } };
      return ['completed', 'failed', 'cancelled'].includes(b.status) ? b : null;
    }, 'the batch to finish', 120_000);
    assert.equal(done.status, 'completed');
    assert.equal(done.request_counts.completed + done.request_counts.failed, 300);
    const lines = [...(await (await p.fetch(`/v1/batches/${batch.id}/output`)).text()).split('\n'), ...(await (await p.fetch(`/v1/batches/${batch.id}/errors`)).text()).split('\n')]
      .filter(Boolean)
      .map((l) => (JSON.parse(l) as { custom_id: string }).custom_id);
    assert.equal(new Set(lines).size, 300, 'one outcome for each of the 300 lines');
    assert.equal(lines.length, 300, 'and no line twice');

    // No request metered twice: a run re-delivered after the failover counts once.
    const usage = await p.redis().xrange(usageKeys.records, '-', '+');
    const ids = usage.map(([, fields]) => (JSON.parse(fields[1]) as { id: string }).id);
    assert.equal(new Set(ids).size, ids.length, 'each usage record once');

    // And back: the old primary, now a replica, is promoted when the new one dies.
    const second = await failOver();
    assert.equal(second.primary, group.servers.find((s) => s !== first.primary));
    checkRefusals(second.sent, second.killedAt, (line) => t.diagnostic(`failing back: ${line}`));
    assert.ok((await jobsSucceeded(second.sent)) > 10);
    for (let i = 0; i < 20; i++) assert.equal((await sync()).status, 200);
    const ready = (await (await fetch(`${p.url}/readyz`, { headers: { authorization: `Bearer ${p.adminKey}` } })).json()) as { ok: boolean; redisServer: { address: string; role: string; replicas: number } };
    assert.equal(ready.ok, true);
    assert.deepEqual({ ...ready.redisServer, address: Number(ready.redisServer.address.split(':').pop()) }, { address: second.primary, role: 'master', replicas: 1, sentinel: 'embers' });
  });
});
