import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { QueueDepth } from '../../gateway/quotas.ts';

/** A queue whose length the test sets; counts reads, and each read waits until the test releases it. */
function fakeQueue() {
  const q = {
    length: 0,
    reads: 0,
    fail: false,
    pending: [] as (() => void)[],
    waiting: async () => {
      q.reads++;
      await new Promise<void>((resolve) => q.pending.push(resolve));
      if (q.fail) throw new Error('Redis is down');
      return q.length;
    },
    release: async () => {
      for (const r of q.pending.splice(0)) r();
      await new Promise((r) => setImmediate(r));
    },
  };
  return q;
}

/** A QueueDepth on a fake queue and clock, whose first reading (at time 0) found `length`. */
async function primed(length: number, max: number) {
  const q = fakeQueue();
  const clock = { now: 0 };
  const depth = new QueueDepth(q, () => clock.now);
  q.length = length;
  const first = depth.check('f', max);
  assert.equal(await settled(first), false, 'nothing read yet: the request waits');
  await q.release();
  await first;
  return { q, clock, depth };
}

/** Whether `p` settles within one turn of the event loop. */
const settled = async (p: Promise<unknown>) => {
  let done = false;
  void p.then(() => (done = true), () => (done = true));
  await new Promise((r) => setImmediate(r));
  return done;
};

describe('queue depth (back-pressure cache)', () => {
  it('waits for the first reading, then reuses it for 250 ms', async () => {
    const { q, clock, depth } = await primed(0, 10);
    clock.now = 200;
    await depth.check('f', 10);
    assert.equal(q.reads, 1);
  });

  it('judges by a stale length well under the limit without waiting, and refreshes it for the next', async () => {
    const { q, clock, depth } = await primed(0, 10);
    clock.now = 300;
    q.length = 50;
    assert.equal(await settled(depth.check('f', 10)), true, 'a stale 0 of 10 does not wait');
    assert.equal(q.reads, 2, 'a fresh reading started');
    assert.equal(await settled(depth.check('f', 10)), true, 'one reading at a time');
    assert.equal(q.reads, 2);
    await q.release();
    await assert.rejects(depth.check('f', 10), { status: 429 });
  });

  it('near the limit, waits for the fresh length', async () => {
    const { q, clock, depth } = await primed(1, 2);
    clock.now = 300;
    q.length = 2;
    const second = depth.check('f', 2);
    assert.equal(await settled(second), false, 'a stale 1 of 2 is too close to trust');
    await q.release();
    await assert.rejects(second, { status: 429 });
  });

  it('a length more than 5 s old is not trusted, however small', async () => {
    const { q, clock, depth } = await primed(0, 10);
    clock.now = 6_000;
    const second = depth.check('f', 10);
    assert.equal(await settled(second), false);
    await q.release();
    await second;
  });

  it('a failed background reading is retried by the next request, and is never unhandled', async () => {
    const { q, clock, depth } = await primed(0, 10);
    clock.now = 300;
    q.fail = true;
    await depth.check('f', 10);
    await q.release();
    q.fail = false;
    await depth.check('f', 10);
    assert.equal(q.reads, 3, 'read again after the failure');
    await q.release();
  });

  it('a failed reading keeps the last length: near the limit the next request still waits', async () => {
    const { q, clock, depth } = await primed(1, 2);
    clock.now = 300;
    q.fail = true;
    const second = assert.rejects(depth.check('f', 2), /Redis is down/);
    await q.release();
    await second;
    q.fail = false;
    const third = depth.check('f', 2);
    assert.equal(await settled(third), false);
    await q.release();
    await third;
  });

  it('a request waiting for the first reading gets its error; the next reads again and recovers', async () => {
    const q = fakeQueue();
    const depth = new QueueDepth(q, () => 0);
    q.fail = true;
    const first = assert.rejects(depth.check('f', 10), /Redis is down/);
    await q.release();
    await first;
    q.fail = false;
    q.length = 3;
    const second = depth.check('f', 10);
    assert.equal(await settled(second), false, 'never read: waits');
    await q.release();
    await second;
    assert.equal(q.reads, 2);
  });
});
