// The live lane on a real redis-server: a replica takes what its free slots allow, finished requests are
// acknowledged and deleted (metered once, and answered in the same call or, alone, just before it), a silent replica's
// requests are taken over with their delivery count, and the gateway's waiting count leaves out
// what replicas hold.
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { type RunJobData } from '../../core/contracts.ts';
import { finishLiveEntries, readLiveEntries, FunctionGoneError, handOverLiveEntries, KeyRejectedError, LIVE_GROUP, leaveLiveGroup, LiveQueue, takeUnstarted } from '../../core/live-queue.ts';
import { decodeLiveJob, SPILL_MIN_BYTES } from '../../core/live-entry.ts';
import { type UsageRecord } from '../../core/usage.ts';
import { createLogger } from '../../core/log.ts';
import { createRedis, type Redis } from '../../core/redis.ts';
import { startLocalRedis, type LocalRedis } from '../../platform/local-redis.ts';
import { LiveConsumer } from '../../runtime/replica/live-consumer.ts';
import { eventually } from '../helpers/platform.ts';
import { keys, liveStream, SCAN_NOW, SPILL_PREFIX, spillKey, tenantKeys, usageKeys } from '../../core/keys.ts';

let server: LocalRedis;
let dir: string;
let redis: Redis;
const log = createLogger('test', 'silent');
const collect = async <T>(it: AsyncIterable<T>): Promise<T[]> => {
  const out: T[] = [];
  for await (const x of it) out.push(x);
  return out;
};
const job = (rid: string): RunJobData => ({ rid, gw: 'gw-test', input: { rid }, enq: Date.now() });

/** Queues `rid` on `fn` and has a replica take it and die at once (SIGKILL: nothing acknowledged, tended or handed over). */
async function orphan(fn: string, rid: string): Promise<LiveQueue> {
  const q = new LiveQueue(redis);
  await q.add(fn, job(rid));
  await redis.xreadgroup('GROUP', LIVE_GROUP, `replica-dead-${fn}`, 'COUNT', 1, 'STREAMS', liveStream(fn), '>');
  return q;
}

before(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'embers-live-'));
  server = await startLocalRedis(dir);
  redis = createRedis(server.url);
});
after(async () => {
  redis.disconnect();
  await server.stop();
  await rm(dir, { recursive: true, force: true });
});

describe('live queue', () => {
  it('hands a queued burst to a replica up to its free slots, and deletes what it finished', async () => {
    const q = new LiveQueue(redis);
    for (let i = 0; i < 5; i++) await q.add('burst', job(`r${i}`));
    assert.equal(await q.waiting('burst'), 5);
    const seen: string[] = [];
    const release: (() => void)[] = [];
    const c = new LiveConsumer({
      redis,
      fn: 'burst',
      consumer: 'replica-a',
      concurrency: 3,
      lockMs: 5_000,
      log,
      process: (_entry, data, deliveries) => {
        assert.equal(deliveries, 1);
        seen.push(data.rid);
        return new Promise<void>((r) => release.push(r));
      },
    });
    await c.start();
    await eventually(async () => seen.length === 3, 'three requests to be taken');
    // Held by the replica: no longer waiting, still in the stream; the rest wait for a slot.
    assert.equal(await q.waiting('burst'), 2);
    assert.equal(await redis.xlen(liveStream('burst')), 5);
    release.splice(0).forEach((r) => r());
    await eventually(async () => seen.length === 5, 'the rest to be taken as slots free');
    assert.deepEqual(seen, ['r0', 'r1', 'r2', 'r3', 'r4']);
    release.splice(0).forEach((r) => r());
    await eventually(async () => (await redis.xlen(liveStream('burst'))) === 0, 'finished entries to be deleted');
    await c.drain();
  });

  it('requests added in one tick are queued in one call, each judged by its own key', async () => {
    await redis.hset(tenantKeys.keysByHash, 'hash-ok', JSON.stringify({ id: 'key-ok' }), 'hash-revoked', JSON.stringify({ id: 'key-r', revokedAt: new Date().toISOString() }));
    // (A connection of its own, made by monitor(). Another connection starting meanwhile, as a
    // duplicate made here just before did, can put its first command into MONITOR's feed in the
    // same read as MONITOR's OK, before ioredis counts the connection as monitoring: it then takes
    // the feed's line for a reply and throws "Command queue state error".)
    const monitor = await redis.monitor();
    const adds: string[][] = [];
    monitor.on('monitor', (_t: string, args: string[]) => {
      if (args[0].toLowerCase() === 'evalsha' && args[3] === tenantKeys.keysByHash) adds.push(args);
    });
    try {
      const q = new LiveQueue(redis);
      await q.add('tick-a', job('warm'));
      await q.add('tick-b', job('warm'));
      // MONITOR's feed is its own connection and may lag the adds: see both warm-ups there before counting afresh.
      await eventually(async () => adds.length === 2, 'the warm-up adds to show in MONITOR');
      adds.length = 0;
      const body = Buffer.from([0, 0xff, 0x80, 0x0a]);
      const outcomes = await Promise.allSettled([
        q.add('tick-a', job('ok-1'), { keyHash: 'hash-ok' }),
        q.add('tick-a', job('revoked'), { keyHash: 'hash-revoked' }),
        q.add('tick-b', job('unknown'), { keyHash: 'hash-gone' }),
        q.add('tick-b', job('bytes'), { keyHash: 'hash-ok', body }),
        q.add('tick-a', job('no-check')),
      ]);
      assert.deepEqual(
        outcomes.map((o) => (o.status === 'fulfilled' ? 'queued' : (o.reason as KeyRejectedError).reason)),
        ['queued', 'revoked', 'unknown', 'queued', 'queued'],
      );
      await eventually(async () => adds.length === 1, 'the adds to reach Redis');
      assert.equal(adds.length, 1, 'one call for the tick');
      const read = async (fn: string) => (await redis.xrangeBuffer(liveStream(fn), '-', '+')).map(([id, fields]) => ({ id: id.toString(), rid: decodeLiveJob(fields)?.rid, fields }));
      const [a, b] = [await read('tick-a'), await read('tick-b')];
      assert.deepEqual(a.map((e) => e.rid), ['warm', 'ok-1', 'no-check']);
      assert.deepEqual(b.map((e) => e.rid), ['warm', 'bytes']);
      const ids = outcomes.filter((o) => o.status === 'fulfilled').map((o) => (o as PromiseFulfilledResult<string>).value);
      assert.deepEqual(ids, [a[1].id, b[1].id, a[2].id], 'each add resolves with its own entry');
      assert.deepEqual(b[1].fields[3], body, 'a binary body is queued byte for byte');
    } finally {
      monitor.disconnect();
    }
  });

  it('an entry Redis refuses fails alone; a tick past the batch size goes in more calls, in order', async () => {
    await redis.hset(tenantKeys.keysByHash, 'hash-ok', JSON.stringify({ id: 'key-ok' }), 'hash-garbled', 'not json');
    const q = new LiveQueue(redis);
    await q.add('tick-c', job('warm'));
    const outcomes = await Promise.allSettled([
      q.add('tick-c', job('before'), { keyHash: 'hash-ok' }),
      q.add('tick-c', job('garbled'), { keyHash: 'hash-garbled' }),
      q.add('tick-c', job('after'), { keyHash: 'hash-ok' }),
    ]);
    assert.deepEqual(outcomes.map((o) => o.status), ['fulfilled', 'rejected', 'fulfilled']);
    assert.match(((outcomes[1] as PromiseRejectedResult).reason as Error).message, /Redis refused the entry: .*invalid token/);
    const rids = async (fn: string) => (await redis.xrangeBuffer(liveStream(fn), '-', '+')).map(([, fields]) => decodeLiveJob(fields)?.rid);
    assert.deepEqual(await rids('tick-c'), ['warm', 'before', 'after']);
    // 1,200 adds in one tick: more than one call (512 a call), every add settled, the order kept.
    await q.add('tick-d', job('warm'));
    const many = Array.from({ length: 1200 }, (_, i) => `m${i}`);
    const ids = await Promise.all(many.map((rid) => q.add('tick-d', job(rid), { keyHash: 'hash-ok' })));
    assert.equal(new Set(ids).size, many.length);
    assert.deepEqual(await rids('tick-d'), ['warm', ...many]);
  });

  it('a replica that goes silent has its requests taken over, with their delivery count', async () => {
    await orphan('crashy', 'held');
    const runs: { rid: string; deliveries: number }[] = [];
    const heir = new LiveConsumer({
      redis,
      fn: 'crashy',
      consumer: 'replica-heir',
      concurrency: 4,
      lockMs: 300,
      log,
      process: async (_entry, data, deliveries) => {
        runs.push({ rid: data.rid, deliveries });
      },
    });
    await heir.start();
    await eventually(async () => runs.length === 1, 'the request to be taken over', 10_000);
    assert.deepEqual(runs, [{ rid: 'held', deliveries: 2 }]);
    await eventually(async () => (await redis.xlen(liveStream('crashy'))) === 0, 'the taken-over request to be deleted');
    await heir.drain();
  });

  it('a replica that abandons what it holds (replaced as stuck) hands it over at once, not after lockMs', async () => {
    const q = new LiveQueue(redis);
    await q.add('handover', job('read-then-stuck'));
    // A 60 s lock: taken over only by the hand-over, well inside this test's 10 s wait.
    const stuck = new LiveConsumer({ redis, fn: 'handover', consumer: 'replica-stuck', concurrency: 2, lockMs: 60_000, log, process: () => new Promise<void>(() => {}) });
    await stuck.start();
    await eventually(async () => (await q.waiting('handover')) === 0, 'the stuck replica to take it');
    await stuck.abandon();
    const runs: { rid: string; deliveries: number }[] = [];
    const next = new LiveConsumer({ redis, fn: 'handover', consumer: 'replica-next', concurrency: 2, lockMs: 60_000, log, process: async (_e, data, deliveries) => void runs.push({ rid: data.rid, deliveries }) });
    const t0 = Date.now();
    await next.start();
    await eventually(async () => runs.length === 1, 'the next replica to take it over', 10_000);
    assert.deepEqual(runs, [{ rid: 'read-then-stuck', deliveries: 2 }]);
    assert.ok(Date.now() - t0 < 10_000);
    await eventually(async () => (await redis.xlen(liveStream('handover'))) === 0, 'the request to be finished');
    await next.drain();
  });

  it("a dead replica's requests, handed over by its agent, are taken by a running replica at once when it is told to scan", async () => {
    // Running before the death, with a 60 s lock: its own first scan and tending find nothing.
    const runs: { rid: string; deliveries: number }[] = [];
    const peer = new LiveConsumer({ redis, fn: 'died', consumer: 'replica-peer', concurrency: 2, lockMs: 60_000, log, process: async (_e, data, deliveries) => void runs.push({ rid: data.rid, deliveries }) });
    await orphan('died', 'held-by-the-dead');
    await peer.start();
    // As a replica does with the cancel channel's messages (runtime/replica/replica.ts).
    const sub = redis.duplicate();
    const told: string[] = [];
    sub.on('message', (_channel: string, message: string) => {
      told.push(message);
      if (message === `died ${SCAN_NOW}`) peer.scanNow();
    });
    await sub.subscribe(keys.cancelChannel);
    try {
      assert.equal(await handOverLiveEntries(redis, 'nothing-here', 'replica-x'), 0, 'no stream: nothing held');
      assert.equal(await handOverLiveEntries(redis, 'died', 'replica-peer'), 0, 'a consumer holding nothing');
      assert.equal(await handOverLiveEntries(redis, 'died', 'replica-dead-died'), 1);
      await eventually(async () => runs.length === 1, 'the running replica to take it', 10_000);
      assert.deepEqual(runs, [{ rid: 'held-by-the-dead', deliveries: 2 }]);
      assert.deepEqual(told, [`died ${SCAN_NOW}`]);
      await eventually(async () => (await redis.xlen(liveStream('died'))) === 0, 'the request to be finished');
    } finally {
      sub.disconnect();
      await peer.drain();
    }
  });

  it("a dead replica's requests are taken over one at a time and each runs alone, before anything new", async () => {
    const q = new LiveQueue(redis);
    for (const rid of ['x1', 'x2', 'x3']) await q.add('alone', job(rid));
    await redis.xreadgroup('GROUP', LIVE_GROUP, 'replica-dead-alone', 'COUNT', 3, 'STREAMS', liveStream('alone'), '>');
    await q.add('alone', job('new'));
    let running = 0;
    let most = 0;
    const runs: { rid: string; deliveries: number }[] = [];
    const heir = new LiveConsumer({
      redis,
      fn: 'alone',
      consumer: 'replica-heir-alone',
      concurrency: 4,
      lockMs: 60_000,
      log,
      process: async (_e, data, deliveries) => {
        most = Math.max(most, ++running);
        runs.push({ rid: data.rid, deliveries });
        await new Promise((r) => setTimeout(r, 50));
        running--;
      },
    });
    assert.equal(await handOverLiveEntries(redis, 'alone', 'replica-dead-alone'), 3);
    await heir.start();
    try {
      await eventually(async () => runs.length === 4, 'all four to run', 15_000);
      assert.deepEqual(runs, [
        { rid: 'x1', deliveries: 2 },
        { rid: 'x2', deliveries: 2 },
        { rid: 'x3', deliveries: 2 },
        { rid: 'new', deliveries: 1 },
      ]);
      assert.equal(most, 1, 'each taken-over request ran alone');
    } finally {
      await heir.drain();
    }
  });

  it('a live replica keeps what it holds past lockMs; a request the gateway took back is skipped, one held is not taken back', async () => {
    const q = new LiveQueue(redis);
    const long = await q.add('slow', job('long'));
    let finish!: () => void;
    // A lock of 1 s: a stall of this test process (or of Redis) of a few hundred ms must not let
    // b's takeover run before a's tending and take the long request.
    const a = new LiveConsumer({ redis, fn: 'slow', consumer: 'replica-a', concurrency: 1, lockMs: 1_000, log, process: () => new Promise<void>((r) => (finish = r)) });
    await a.start();
    await eventually(async () => finish !== undefined, 'the long request to start');
    const taken: string[] = [];
    const b = new LiveConsumer({ redis, fn: 'slow', consumer: 'replica-b', concurrency: 4, lockMs: 1_000, log, process: async (_e, data) => void taken.push(data.rid) });
    // Taken back before anyone read it (a gateway's 504): never run. (a, busy, reads nothing; b starts after.)
    const gone = await q.add('slow', job('timed-out'));
    assert.equal(await q.takeBack('slow', gone), true);
    // One a replica holds stays with it, to be finished and metered there.
    assert.equal(await q.takeBack('slow', long), false);
    await b.start();
    await q.add('slow', job('next'));
    await eventually(async () => taken.includes('next'), 'the next request to run on b');
    await new Promise((r) => setTimeout(r, 3_000)); // three lock periods: a would have lost it without tending
    assert.deepEqual(taken, ['next']);
    finish();
    await a.drain();
    await b.drain();
    assert.equal(await redis.xlen(liveStream('slow')), 0);
  });

  it('a replica leaves the group only when it holds nothing, so held requests stay claimable', async () => {
    const q = new LiveQueue(redis);
    await q.add('leave', job('held'));
    await redis.xreadgroup('GROUP', LIVE_GROUP, 'holder', 'COUNT', 10, 'STREAMS', liveStream('leave'), '>');
    await redis.xgroup('CREATECONSUMER', liveStream('leave'), LIVE_GROUP, 'idle');
    await leaveLiveGroup(redis, 'leave', 'holder');
    await leaveLiveGroup(redis, 'leave', 'idle');
    const consumers = (await redis.xinfo('CONSUMERS', liveStream('leave'), LIVE_GROUP)) as unknown[][];
    assert.deepEqual(consumers.map((c) => c[1]), ['holder']);
  });

  it('a busy replica takes over a silent one\'s requests once what it runs has ended, before newer ones', async () => {
    const q = await orphan('busy', 'orphan');
    const order: string[] = [];
    let finishFirst!: () => void;
    const heir = new LiveConsumer({
      redis,
      fn: 'busy',
      consumer: 'replica-busy',
      concurrency: 1,
      lockMs: 2_000,
      log,
      process: (_e, data) => {
        order.push(data.rid);
        return data.rid === 'first' ? new Promise<void>((r) => (finishFirst = r)) : Promise.resolve();
      },
    });
    await q.add('busy', job('first'));
    await heir.start();
    await eventually(async () => order.includes('first'), 'the heir to be busy');
    await q.add('busy', job('newer'));
    // Past the lock the heir's tending sees the orphan and stops reading new requests; it takes
    // it only once 'first' has ended (held while waiting, it would count a crash of the heir).
    await eventually(async () => (heir as unknown as { lookForTakeOver: boolean }).lookForTakeOver, 'the heir to see the orphan');
    const [, , , owners] = (await redis.xpending(liveStream('busy'), LIVE_GROUP)) as [number, unknown, unknown, [string, string][]];
    assert.ok(owners.some(([c]) => c === 'replica-dead-busy'), 'not taken while the heir is busy');
    finishFirst();
    await eventually(async () => order.length === 3, 'everything to run');
    assert.deepEqual(order, ['first', 'orphan', 'newer']);
    await heir.drain();
  });

  it('a request finished by two replicas (one was taken for dead) is metered once; its reply goes out both times', async () => {
    const fn = 'twice';
    const q = new LiveQueue(redis);
    const entry = await q.add(fn, job('dup'));
    // Replica a reads it and goes silent; b takes it over (as claimLiveEntry would).
    await redis.xreadgroup('GROUP', LIVE_GROUP, 'replica-a', 'COUNT', 1, 'STREAMS', liveStream(fn), '>');
    await redis.xclaim(liveStream(fn), LIVE_GROUP, 'replica-b', 0, entry);
    const sub = redis.duplicate();
    const replies: string[] = [];
    sub.on('message', (_ch: string, m: string) => replies.push(m));
    await sub.subscribe('embers:test:replies');
    const usage: UsageRecord = { id: 'gw-minted-id', tenant: 'acme', key: 'key-1', fn, version: 'v1', kind: 'sync', status: 200, queueMs: 1, computeMs: Number.NaN, inferMs: 2, coldMs: 0, bytesIn: 10, bytesOut: 20, at: new Date().toISOString(), price: { perRequest: 0.25, perComputeSecond: 0 }, cost: 0.25 };
    const outcome = { usage, reply: { channel: 'embers:test:replies', message: 'answer' } };
    assert.deepEqual(await finishLiveEntries(redis, fn, [{ id: entry, outcome }]), [true], 'b finishes first and meters it');
    assert.deepEqual(await finishLiveEntries(redis, fn, [{ id: entry, outcome }]), [false], 'a finishes late: not metered again');
    const records = (await redis.xrange(usageKeys.records, '-', '+')).filter(([, f]) => (JSON.parse(f[1]) as UsageRecord).id === usage.id);
    assert.equal(records.length, 1);
    const hour = await redis.hgetall(usageKeys.hour('acme', usage.at.slice(0, 13).replace(/[-T]/g, '')));
    assert.equal(hour[`${fn}|requests`], '1');
    assert.equal(hour[`${fn}|compute_ms`], '0', 'a NaN time is written as 0 rather than failing the call');
    assert.equal(hour[`${fn}|cost`], '0.25');
    const month = await redis.hgetall(usageKeys.month('acme', usage.at.slice(0, 7).replace('-', '')));
    assert.deepEqual([month[`${fn}|v1|requests`], month[`${fn}|v1|cost`], month['*|requests'], month['*|cost']], ['1', '0.25', '1', '0.25'], 'the month roll-up counts it once');
    assert.ok(await redis.sismember(usageKeys.tenants, 'acme'));
    await eventually(async () => replies.length === 2, 'both replies');
    assert.equal(await redis.xlen(liveStream(fn)), 0, 'the entry is deleted');
    assert.equal(await redis.exists(usageKeys.seen(usage.id)), 0, 'no seen key is kept for a live request');
    sub.disconnect();
  });

  it('a lone finished request is answered before its finishing call, as is a large reply; a busy tick is answered in that call, in one message', async () => {
    const fn = 'answers';
    const q = new LiveQueue(redis);
    const sub = redis.duplicate();
    const replies: string[] = [];
    sub.on('message', (_ch: string, m: string) => replies.push(m));
    await sub.subscribe('embers:test:answers');
    // What Redis runs, in order (MONITOR), with where each command came from: the replica's
    // connection, or the finishing script ("lua").
    // (A connection of its own, made by monitor(). Another connection starting meanwhile, as a
    // duplicate made here just before did, can put its first command into MONITOR's feed in the
    // same read as MONITOR's OK, before ioredis counts the connection as monitoring: it then takes
    // the feed's line for a reply and throws "Command queue state error".)
    const monitor = await redis.monitor();
    const commands: string[] = [];
    monitor.on('monitor', (_t: string, args: string[], source: string) => {
      const name = args[0].toLowerCase();
      // The adds (their first key is the API keys hash) are the gateway's, not the replica's.
      if (name === 'evalsha' && args[3] === tenantKeys.keysByHash) return;
      if (name === 'publish' || name === 'evalsha') commands.push(source === 'lua' ? `script ${name}` : name);
    });
    const release: (() => void)[] = [];
    const c = new LiveConsumer({
      redis,
      fn,
      consumer: 'replica-a',
      concurrency: 3,
      lockMs: 5_000,
      log,
      process: async (_entry, data) => {
        await new Promise<void>((r) => release.push(r));
        const usage: UsageRecord = { id: `u-${data.rid}`, tenant: 'acme', key: 'key-1', fn, version: 'v1', kind: 'sync', status: 200, queueMs: 1, computeMs: 1, inferMs: 1, coldMs: 0, bytesIn: 1, bytesOut: 1, at: new Date().toISOString(), price: { perRequest: 0, perComputeSecond: 0 }, cost: 0 };
        return { usage, reply: { channel: 'embers:test:answers', message: data.rid === 'big' ? `answer big ${'x'.repeat(SPILL_MIN_BYTES)}` : `answer ${data.rid}` } };
      },
    });
    await c.start();
    try {
      await q.add(fn, job('lone'));
      await eventually(async () => release.length === 1, 'the lone request to start');
      release.splice(0)[0]();
      await eventually(async () => (await redis.xlen(liveStream(fn))) === 0, 'the lone request to be finished');
      assert.deepEqual(replies, ['answer lone']);
      // MONITOR's feed may lag what it reports: wait for as many commands as expected, then compare.
      await eventually(async () => commands.length >= 2, 'the finishing call to show in MONITOR');
      assert.deepEqual(commands, ['publish', 'evalsha'], 'the reply on its own, then the finishing call without it');
      for (const rid of ['b0', 'b1', 'b2']) await q.add(fn, job(rid));
      await eventually(async () => release.length === 3, 'the three to start');
      release.splice(0).forEach((r) => r());
      await eventually(async () => (await redis.xlen(liveStream(fn))) === 0, 'the three to be finished');
      await eventually(async () => replies.length === 2, 'their message');
      assert.match(replies[1], /^\+\d+,\d+,\d+\n/, 'one framed message for the tick');
      await eventually(async () => commands.length >= 4, "the tick's finishing call to show in MONITOR");
      assert.deepEqual(commands, ['publish', 'evalsha', 'evalsha', 'script publish'], 'the tick is answered inside its finishing call');
      // A reply of 16 KiB or more leaves on its own before the call, busy tick or not.
      for (const rid of ['c0', 'big']) await q.add(fn, job(rid));
      await eventually(async () => release.length === 2, 'the two to start');
      release.splice(0).forEach((r) => r());
      await eventually(async () => (await redis.xlen(liveStream(fn))) === 0, 'the two to be finished');
      await eventually(async () => replies.length === 4, 'their messages');
      assert.ok(replies.some((r) => r.startsWith('answer big') && r.length > SPILL_MIN_BYTES), 'the large reply whole, in a message of its own');
      await eventually(async () => commands.length >= 7, "the tick's commands to show in MONITOR");
      assert.deepEqual(commands.slice(4), ['publish', 'evalsha', 'script publish'], 'the large reply first, the other inside the finishing call');
      const records = (await redis.xrange(usageKeys.records, '-', '+')).map(([, f]) => (JSON.parse(f[1]) as UsageRecord).id).filter((id) => id.startsWith('u-'));
      assert.deepEqual(records.sort(), ['u-b0', 'u-b1', 'u-b2', 'u-big', 'u-c0', 'u-lone'], 'each metered once');
    } finally {
      release.splice(0).forEach((r) => r());
      await c.drain();
      monitor.disconnect();
      sub.disconnect();
    }
  });

  it('finishing entries of a stream Redis lost still publishes their replies', async () => {
    const sub = redis.duplicate();
    const replies: string[] = [];
    sub.on('message', (_ch: string, m: string) => replies.push(m));
    await sub.subscribe('embers:test:lost');
    assert.deepEqual(await finishLiveEntries(redis, 'never-made', [{ id: '1-1', outcome: { reply: { channel: 'embers:test:lost', message: 'still answered' } } }]), [false]);
    await eventually(async () => replies.length === 1, 'the reply');
    sub.disconnect();
  });
  it('a large body or input waits beside its entry, reaches the replica whole (read or taken over), and goes with the entry', async () => {
    const q = new LiveQueue(redis);
    const spilled = async () => (await redis.keys(`${SPILL_PREFIX}*`)).concat(await redis.keys('embers:spill-new:*')).sort();
    const body = Buffer.alloc(SPILL_MIN_BYTES + 7, 0xfe);
    const text = JSON.stringify({ image: 'x'.repeat(SPILL_MIN_BYTES) });
    // A binary body and a JSON input over the line, and a small one that stays in its entry.
    const [bin, json] = await Promise.all([
      q.add('big', { ...job('bin'), input: { n: 1 }, raw: 'bytes' }, { inputJson: '{"n":1}', body }),
      q.add('big', job('json'), { inputJson: text }),
      q.add('big', job('small'), { inputJson: '{"rid":"small"}' }),
    ]);
    assert.deepEqual(await spilled(), [spillKey('big', bin), spillKey('big', json)].sort());
    // The entries themselves stay small: what Redis's Lua saw was a key name, not the bytes.
    const sizes = (await redis.xrangeBuffer(liveStream('big'), '-', '+')).map(([, f]) => f.reduce((n, b) => n + b.length, 0));
    assert.ok(sizes.every((n) => n < 1024), `entries of ${sizes.join(', ')} bytes`);
    // One replica reads the binary one and dies holding it; the heir takes it over whole.
    await redis.xreadgroup('GROUP', LIVE_GROUP, 'replica-dead-big', 'COUNT', 1, 'STREAMS', liveStream('big'), '>');
    const runs = new Map<string, RunJobData>();
    const c = new LiveConsumer({ redis, fn: 'big', consumer: 'replica-big', concurrency: 4, lockMs: 300, log, process: async (_e, data) => void runs.set(data.rid, data) });
    await c.start();
    await eventually(async () => runs.size === 3, 'the three requests to run', 10_000);
    assert.deepEqual((runs.get('bin')!.input as { bytes: Buffer; n: number }).bytes, body);
    assert.equal((runs.get('bin')!.input as { n: number }).n, 1);
    assert.deepEqual(runs.get('json')!.input, JSON.parse(text));
    assert.deepEqual(runs.get('small')!.input, { rid: 'small' });
    assert.ok(!runs.get('bin')!.bodyMissing);
    await eventually(async () => (await redis.xlen(liveStream('big'))) === 0 && (await spilled()).length === 0, 'entries and their parts to be removed');
    await c.drain();
    // Taken back unread, and refused (an unknown key): nothing is left behind either.
    const back = await q.add('big', job('back'), { inputJson: text });
    assert.equal(await q.takeBack('big', back), true);
    await assert.rejects(q.add('big', job('refused'), { inputJson: text, keyHash: 'no-such-key' }), KeyRejectedError);
    assert.deepEqual(await spilled(), []);
    // A part gone before a replica reads its entry (expired): the job is marked damaged, not run on nothing.
    const lost = await q.add('big', job('lost'), { inputJson: text });
    await redis.del(spillKey('big', lost));
    const [[, fields]] = await readLiveEntries(redis, 'big', 'replica-x', 1);
    assert.equal(decodeLiveJob(fields)?.bodyMissing, true);
  });

  it('an add that must find its function deployed is refused once it is gone, in the same call as the others', async () => {
    const q = new LiveQueue(redis);
    await redis.sadd(keys.functionIndex, 'still-here');
    const outcomes = await Promise.allSettled([
      q.add('still-here', job('kept'), { mustBeDeployed: true }),
      q.add('gone-fn', job('refused'), { mustBeDeployed: true }),
      q.add('gone-fn', job('unchecked')),
    ]);
    assert.deepEqual(
      outcomes.map((o) => (o.status === 'fulfilled' ? 'queued' : o.reason instanceof FunctionGoneError ? `gone ${o.reason.fn}` : String(o.reason))),
      ['queued', 'gone gone-fn', 'queued'],
    );
    assert.deepEqual((await redis.xrangeBuffer(liveStream('gone-fn'), '-', '+')).map(([, f]) => decodeLiveJob(f)?.rid), ['unchecked']);
    await redis.srem(keys.functionIndex, 'still-here');
  });

  it('takeUnstarted takes out, page by page, every entry no replica has read, and leaves the ones being run', async () => {
    const q = new LiveQueue(redis);
    for (let i = 0; i < 150; i++) await q.add('doomed', job(`d${i}`));
    // Two replicas are running the first 73: more than a whole page, which must not stop the look.
    await redis.xreadgroup('GROUP', LIVE_GROUP, 'replica-r', 'COUNT', 3, 'STREAMS', liveStream('doomed'), '>');
    await redis.xreadgroup('GROUP', LIVE_GROUP, 'replica-s', 'COUNT', 70, 'STREAMS', liveStream('doomed'), '>');
    await redis.xadd(liveStream('doomed'), '*', 'x', 'not a job');
    const taken: (string | undefined)[] = [];
    for await (const data of takeUnstarted(redis, 'doomed')) taken.push(data?.rid);
    assert.equal(taken.length, 78, 'every entry no replica has read, the unreadable one included');
    assert.deepEqual(taken.slice(0, 2), ['d73', 'd74']);
    assert.equal(taken.at(-1), undefined, 'an entry without a job record is taken out, as undefined');
    const left = (await redis.xrangeBuffer(liveStream('doomed'), '-', '+')).map(([, f]) => decodeLiveJob(f)?.rid);
    assert.deepEqual(left, Array.from({ length: 73 }, (_, i) => `d${i}`), 'the ones being run are left to their replicas');
    assert.equal((await collect(takeUnstarted(redis, 'never-had-a-stream'))).length, 0);
  });
});
