// A replica killed outright (SIGKILL, the kernel's OOM killer, a crash in native code) runs no
// code of its own, so the live requests it held would wait out the lock time before another
// replica took them. Its agent hands them over as soon as the process has exited. The lock here
// is ten minutes and the gateway's queue limit 20 s: a request left for the lock would be
// answered 504, so an answer of 200 is the hand-over.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { type RunJobData } from '../../core/contracts.ts';
import { handOverLiveEntries, LIVE_GROUP } from '../../core/live-queue.ts';
import { eventually, fixture, startTestPlatform, type TestPlatform } from '../helpers/platform.ts';
import { keys, liveStream } from '../../core/keys.ts';

let p: TestPlatform;

before(async () => {
  p = await startTestPlatform({ EMBERS_JOB_LOCK_MS: '600000', EMBERS_QUEUE_TIMEOUT_MS: '20000' });
  await p.deploy(fixture('sleepy.ts'));
  await p.deploy(fixture('boom.ts'));
});
after(() => p?.close());

const call = (fn: string, body: unknown) => p.fetch(`/v1/run/${fn}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
const run = (body: unknown) => call('sleepy', body);
/** The replica of `fn` whose consumer holds requests now, once there is one. */
const holder = (fn: string, atLeast = 1) =>
  eventually(async () => {
    const [, , , consumers] = (await p.redis().xpending(liveStream(fn), LIVE_GROUP)) as [number, unknown, unknown, [string, string][] | null];
    const id = consumers?.find(([, n]) => Number(n) >= atLeast)?.[0];
    return p.agent.running().find((r) => r.id === id && r.pid !== undefined) ?? null;
  }, `a replica of ${fn} holding requests`);

describe('a replica killed outright', () => {
  it('has its live requests handed over by its agent and answered, not left for the lock time', async () => {
    assert.equal((await run({ ms: 1 })).status, 200, 'a warm replica');
    const pending = Array.from({ length: 4 }, (_, i) => run({ ms: 1_500, tag: `held-${i}` }));
    // The replica holding requests (in the group's pending list under its id) is the one to kill.
    const victim = await holder('sleepy');
    process.kill(victim.pid!, 'SIGKILL');
    const results = await Promise.all(pending);
    assert.deepEqual(results.map((r) => r.status), [200, 200, 200, 200]);
    const bodies = (await Promise.all(results.map((r) => r.json()))) as { tag: string; pid: number }[];
    assert.deepEqual(bodies.map((b) => b.tag).sort(), ['held-0', 'held-1', 'held-2', 'held-3']);
    // Killed well inside its 1.5 s sleeps, the victim answered none: what it held ran again elsewhere.
    assert.ok(bodies.every((b) => b.pid !== victim.pid), JSON.stringify(bodies));
    // Its consumer leaves the live group once the others hold what it held.
    const consumers = async () => ((await p.redis().xinfo('CONSUMERS', liveStream('sleepy'), LIVE_GROUP)) as string[][]).map((c) => c[1]);
    await eventually(async () => !(await consumers()).includes(victim.id), 'the dead replica to leave the group', 20_000);
  });

  it('a running replica takes handed-over requests when told on the cancel channel, not at its next tending (every 200 s here)', async () => {
    assert.equal((await run({ ms: 1 })).status, 200, 'a running replica');
    const redis = p.redis();
    const sub = redis.duplicate();
    const replies: Buffer[] = [];
    sub.on('messageBuffer', (_channel: Buffer, message: Buffer) => replies.push(message));
    await sub.subscribe(keys.replyChannel('gw-ghost'));
    try {
      // Queued and read by a consumer that is no replica, in one transaction (no replica can read
      // it first), as if a replica had read it and died; then handed over as its agent would.
      const data: RunJobData = { rid: 'ghost-1', gw: 'gw-ghost', input: { ms: 1, tag: 'ghost' }, enq: Date.now() };
      await redis.multi().xadd(liveStream('sleepy'), '*', 'd', JSON.stringify(data)).xreadgroup('GROUP', LIVE_GROUP, 'replica-ghost', 'COUNT', 1, 'STREAMS', liveStream('sleepy'), '>').exec();
      assert.equal(await handOverLiveEntries(redis, 'sleepy', 'replica-ghost'), 1);
      // ~0.6 s through the notice; a tending of the replica's own falls in these 10 s 1 time in 20.
      await eventually(async () => replies.some((m) => m.includes('ghost-1')), 'a running replica to answer it', 10_000);
    } finally {
      sub.disconnect();
    }
  });

  it('requests that ran beside one that kills its replica run again alone, and only that one fails', async () => {
    assert.equal((await call('boom', { mode: 'ok' })).status, 200, 'a warm replica');
    const naps = Array.from({ length: 3 }, () => call('boom', { mode: 'nap' }));
    await holder('boom', 3);
    // Kills its replica, and the next one it runs on; the third answers it unrun.
    const poison = await call('boom', { mode: 'exit' });
    assert.equal(poison.status, 500);
    assert.equal(((await poison.json()) as { error: { code: string } }).error.code, 'replica_crashed');
    // Before they ran alone, the naps ran beside it again and were answered the same way.
    const results = await Promise.all(naps);
    assert.deepEqual(results.map((r) => r.status), [200, 200, 200]);
  });
  it('what a replica of a force-deleted function still ran when it was killed is answered by its agent, not left', async () => {
    assert.equal((await call('boom', { mode: 'ok' })).status, 200, 'a warm replica');
    const naps = [call('boom', { mode: 'nap' }), call('boom', { mode: 'nap' })];
    const queued = await p.fetch('/v1/run/boom', { method: 'POST', headers: { prefer: 'respond-async' }, body: JSON.stringify({ mode: 'nap' }) });
    const job = ((await queued.json()) as { id: string }).id;
    const victim = await holder('boom', 3);
    // Forced: what runs is left to the replica, which is killed before its naps end (as its stop's grace running out would).
    const deleted = await p.fetch('/v1/functions/boom?force=true', { method: 'DELETE' });
    assert.deepEqual(await deleted.json(), { deleted: 'boom', dropped: 0 });
    process.kill(victim.pid!, 'SIGKILL');
    for (const res of await Promise.all(naps)) {
      assert.equal(res.status, 500);
      assert.equal(((await res.json()) as { error: { code: string } }).error.code, 'function_deleted');
    }
    const view = await eventually(async () => {
      const v = (await (await p.fetch(`/v1/jobs/${job}`)).json()) as { status: string; httpStatus?: number; error?: { code: string } };
      return v.status === 'running' || v.status === 'queued' ? null : v;
    }, 'the async job to end');
    assert.deepEqual([view.status, view.httpStatus, view.error?.code], ['failed', 500, 'function_deleted']);
    // Answered first, then dropped from the queue (agent.ts answerHeld): the drop may follow the answers by a moment.
    await eventually(async () => (await p.redis().xlen(liveStream('boom'))) === 0, 'nothing left in its queue');
    await p.deploy(fixture('boom.ts'));
  });
});
