import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { DynamicBatcher, type Clock } from '../../runtime/batcher.ts';
import { tensor, type Feeds } from '../../native/tensor.ts';

/** A clock the test moves by hand. */
class FakeClock implements Clock {
  t = 0;
  private timers: { at: number; fn: () => void; id: number }[] = [];
  private nextId = 1;
  now = () => this.t;
  setTimeout = (fn: () => void, ms: number) => {
    const id = this.nextId++;
    this.timers.push({ at: this.t + ms, fn, id });
    return id;
  };
  clearTimeout = (id: unknown) => {
    this.timers = this.timers.filter((t) => t.id !== id);
  };
  advance(ms: number) {
    this.t += ms;
    for (const due of this.timers.filter((t) => t.at <= this.t)) {
      this.clearTimeout(due.id);
      due.fn();
    }
  }
}

/** An executor that doubles its input and records every batch; resolves when the test says. */
function recorder() {
  const batches: { dims: readonly number[]; release: () => void }[] = [];
  const execute = (feeds: Feeds) =>
    new Promise<{ outputs: Feeds; inferMs: number }>((resolve) => {
      const x = feeds.x;
      const y = Float32Array.from(x.data as Float32Array, (v) => v * 2);
      batches.push({ dims: x.dims, release: () => resolve({ outputs: { y: tensor('float32', y, x.dims) }, inferMs: 10 }) });
    });
  return { batches, execute };
}

const rowsOf = (values: number[], width = 2) => ({ x: tensor('float32', Float32Array.from(values.flatMap((v) => Array(width).fill(v))), [values.length, width]) });
const flush = () => new Promise((r) => setImmediate(r));

describe('DynamicBatcher', () => {
  it('runs a full batch at once, without waiting for the delay', async () => {
    const clock = new FakeClock();
    const { batches, execute } = recorder();
    const b = new DynamicBatcher({ maxBatchSize: 3, maxDelayMs: 100, execute, clock });
    const calls = [1, 2, 3].map((v) => b.run(rowsOf([v])));
    assert.equal(batches.length, 1);
    assert.deepEqual(batches[0].dims, [3, 2]);
    batches[0].release();
    const results = await Promise.all(calls);
    assert.deepEqual(results.map((r) => [...(r.outputs.y.data as Float32Array)]), [[2, 2], [4, 4], [6, 6]]);
    assert.deepEqual(results.map((r) => r.outputs.y.dims), [[1, 2], [1, 2], [1, 2]]);
    assert.equal(b.stats.executions, 1);
    assert.equal(b.stats.inferences, 3);
    assert.equal(b.stats.maxCallsPerBatch, 3);
  });

  it('runs a partial batch when the oldest call has waited maxDelayMs', async () => {
    const clock = new FakeClock();
    const { batches, execute } = recorder();
    const b = new DynamicBatcher({ maxBatchSize: 8, maxDelayMs: 5, execute, clock });
    const first = b.run(rowsOf([1]));
    clock.advance(3);
    const second = b.run(rowsOf([2]));
    assert.equal(batches.length, 0, 'nothing runs before the delay');
    clock.advance(2);
    assert.equal(batches.length, 1);
    assert.deepEqual(batches[0].dims, [2, 2]);
    batches[0].release();
    const [r1, r2] = await Promise.all([first, second]);
    assert.equal(r1.waitMs, 5);
    assert.equal(r2.waitMs, 2);
    assert.equal(r1.inferMs, 5, 'each caller is charged its share of the batch');
  });

  it('never mixes calls whose non-batch dimensions differ', async () => {
    const clock = new FakeClock();
    const { batches, execute } = recorder();
    const b = new DynamicBatcher({ maxBatchSize: 8, maxDelayMs: 1, execute, clock });
    const narrow = [b.run(rowsOf([1], 2)), b.run(rowsOf([2], 2))];
    const wide = b.run(rowsOf([3], 4));
    clock.advance(1);
    batches[0].release();
    await flush();
    clock.advance(1);
    batches[1].release();
    await Promise.all([...narrow, wide]);
    assert.deepEqual(batches.map((x) => x.dims), [[2, 2], [1, 4]]);
  });

  it('keeps gathering while an inference runs, so load forms larger batches', async () => {
    const clock = new FakeClock();
    const { batches, execute } = recorder();
    const b = new DynamicBatcher({ maxBatchSize: 16, maxDelayMs: 0, execute, clock });
    const first = b.run(rowsOf([0]));
    assert.equal(batches.length, 1, 'an idle model runs a lone call at once with maxDelayMs 0');
    const rest = [1, 2, 3, 4].map((v) => b.run(rowsOf([v])));
    clock.advance(50);
    assert.equal(batches.length, 1, 'one inference at a time');
    batches[0].release();
    await first;
    await flush();
    assert.equal(batches.length, 2);
    assert.deepEqual(batches[1].dims, [4, 2]);
    batches[1].release();
    await Promise.all(rest);
    assert.deepEqual(b.stats.callsPerBatch, { 1: 1, 4: 1 });
  });

  it('seals a batch before it would exceed maxBatchSize rows; a lone oversized call runs alone', async () => {
    const clock = new FakeClock();
    const { batches, execute } = recorder();
    const b = new DynamicBatcher({ maxBatchSize: 4, maxDelayMs: 10, execute, clock });
    const a = b.run(rowsOf([1, 1, 1]));
    const c = b.run(rowsOf([2, 2]));
    assert.deepEqual(batches.map((x) => x.dims), [[3, 2]], 'the 3-row group is sealed instead of growing to 5');
    batches[0].release();
    await a;
    const big = b.run(rowsOf([5, 5, 5, 5, 5, 5]));
    clock.advance(10);
    await flush();
    batches[1].release();
    await c;
    await flush();
    assert.deepEqual(batches[2].dims, [6, 2]);
    batches[2].release();
    assert.equal((await big).outputs.y.dims[0], 6);
  });

  it('rejects every caller of a failed batch and keeps serving', async () => {
    const clock = new FakeClock();
    let fail = true;
    const b = new DynamicBatcher({
      maxBatchSize: 2,
      maxDelayMs: 1,
      clock,
      execute: async (feeds) => {
        if (fail) throw new Error('model exploded');
        return { outputs: { y: feeds.x }, inferMs: 1 };
      },
    });
    const results = await Promise.allSettled([b.run(rowsOf([1])), b.run(rowsOf([2]))]);
    assert.deepEqual(results.map((r) => r.status), ['rejected', 'rejected']);
    assert.match(String((results[0] as PromiseRejectedResult).reason), /model exploded/);
    fail = false;
    const ok = b.run(rowsOf([3]));
    clock.advance(1);
    assert.equal((await ok).outputs.y.dims[0], 1);
    assert.equal(b.stats.failures, 1);
  });

  it('rejects outputs without a matching batch dimension with an actionable message', async () => {
    const b = new DynamicBatcher({
      maxBatchSize: 2,
      maxDelayMs: 5,
      clock: new FakeClock(),
      execute: async () => ({ outputs: { y: tensor('float32', new Float32Array(1), [1]) }, inferMs: 1 }),
    });
    const results = await Promise.allSettled([b.run(rowsOf([1])), b.run(rowsOf([2]))]);
    assert.ok(results.every((r) => r.status === 'rejected'));
    assert.match(String((results[0] as PromiseRejectedResult).reason), /maxBatchSize to 1/);
  });

  it('runs at once when every caller that could join is already waiting', async () => {
    const clock = new FakeClock();
    const { batches, execute } = recorder();
    let inFlight = 1;
    const b = new DynamicBatcher({ maxBatchSize: 8, maxDelayMs: 50, execute, clock, potentialCallers: () => inFlight });
    const lone = b.run(rowsOf([1]));
    assert.equal(batches.length, 1, 'the only request in flight does not wait for company');
    batches[0].release();
    await lone;
    inFlight = 3;
    const a = b.run(rowsOf([2]));
    const c = b.run(rowsOf([3]));
    assert.equal(batches.length, 1, 'a third request in flight may still come: wait');
    const d = b.run(rowsOf([4]));
    assert.equal(batches.length, 2, 'all three are here: run');
    assert.deepEqual(batches[1].dims, [3, 2]);
    batches[1].release();
    await Promise.all([a, c, d]);
  });

  it('refuses bad options and feeds without rows', async () => {
    assert.throws(() => new DynamicBatcher({ maxBatchSize: 0, maxDelayMs: 1, execute: async () => ({ outputs: {}, inferMs: 0 }) }), /maxBatchSize/);
    const b = new DynamicBatcher({ maxBatchSize: 2, maxDelayMs: 1, execute: async () => ({ outputs: {}, inferMs: 0 }) });
    await assert.rejects(b.run({}), /batch dimension/);
  });
});
