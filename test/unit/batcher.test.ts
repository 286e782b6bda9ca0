import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { BatchTuner } from '../../runtime/user-code/batch-tuner.ts';
import { type Clock } from '../../core/clock.ts';
import { DynamicBatcher } from '../../runtime/user-code/batcher.ts';
import { LiveFirst } from '../../runtime/channel/live-first.ts';
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
    assert.deepEqual([r1.execMs, r2.execMs], [10, 10], 'and told how long the whole run took');
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

  it('leaves lone runs, wide or not, out of batch-size tuning', async () => {
    const clock = new FakeClock();
    let flags: { wide?: boolean; lone?: boolean } = { lone: true };
    const execute = async (feeds: Feeds) => ({ outputs: { y: feeds.x }, inferMs: 10, ...flags });
    const b = new DynamicBatcher({ maxBatchSize: 8, maxDelayMs: 0, execute, clock });
    for (const f of [{ lone: true }, { wide: true, lone: true }]) {
      flags = f;
      await b.run(rowsOf([1]));
    }
    assert.deepEqual(b.stats.costPerRow, {}, 'nothing measured from lone runs');
    assert.equal(b.stats.wide, 1);
    flags = {};
    await b.run(rowsOf([1]));
    assert.ok(Object.keys(b.stats.costPerRow).length > 0, 'a run under load is measured');
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

  it('runs as many batches at once as the model has instances, gathering only when all are busy', async () => {
    const clock = new FakeClock();
    const { batches, execute } = recorder();
    let instances = 1;
    const b = new DynamicBatcher({ maxBatchSize: 16, maxDelayMs: 0, execute, clock, instances: () => instances });
    const first = b.run(rowsOf([0]));
    instances = 2; // a second instance finished loading
    const second = b.run(rowsOf([1]));
    assert.equal(batches.length, 2, 'the free instance takes the next call at once');
    const rest = [2, 3, 4].map((v) => b.run(rowsOf([v])));
    clock.advance(50);
    assert.equal(batches.length, 2, 'both busy: the others gather');
    batches[0].release();
    await first;
    await flush();
    assert.equal(batches.length, 3);
    assert.deepEqual(batches[2].dims, [3, 2]);
    batches[1].release();
    batches[2].release();
    await Promise.all([second, ...rest]);
    assert.deepEqual(b.stats.callsPerBatch, { 1: 2, 3: 1 });
  });

  it('a free instance does not wait for callers whose calls run on another instance', async () => {
    const clock = new FakeClock();
    const { batches, execute } = recorder();
    const b = new DynamicBatcher({ maxBatchSize: 16, maxDelayMs: 50, execute, clock, instances: () => 2, potentialCallers: () => 3 });
    const first = b.run(rowsOf([0]));
    clock.advance(50);
    assert.equal(batches.length, 1, 'alone past its delay');
    const others = [1, 2].map((v) => b.run(rowsOf([v])));
    assert.equal(batches.length, 2, 'the two callers left both wait here: nobody else could join');
    assert.deepEqual(batches[1].dims, [2, 2]);
    batches[0].release();
    batches[1].release();
    await Promise.all([first, ...others]);
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

  it('never mixes live and low-priority calls, and runs live ones first', async () => {
    const clock = new FakeClock();
    const { batches, execute } = recorder();
    const b = new DynamicBatcher({ maxBatchSize: 4, maxDelayMs: 10, execute, clock });
    const first = b.run(rowsOf([1]), 'batch');
    clock.advance(10);
    assert.equal(batches.length, 1, 'a low call runs when nothing live waits');
    const low = [b.run(rowsOf([2]), 'batch'), b.run(rowsOf([3]), 'batch')];
    const live = b.run(rowsOf([4]));
    batches[0].release();
    await first;
    clock.advance(10);
    assert.equal(batches.length, 2);
    assert.deepEqual([...(batches[1].dims)], [1, 2], 'the live call ran alone, ahead of the older low ones');
    batches[1].release();
    assert.deepEqual([...((await live).outputs.y.data as Float32Array)], [8, 8]);
    clock.advance(10);
    assert.deepEqual([...(batches[2].dims)], [2, 2], 'then the low ones, together');
    batches[2].release();
    await Promise.all(low);
  });

  it('holds low-priority calls while batchMayRun is false, until poked', async () => {
    const clock = new FakeClock();
    const { batches, execute } = recorder();
    let mayRun = false;
    const b = new DynamicBatcher({ maxBatchSize: 2, maxDelayMs: 5, execute, clock, batchMayRun: () => mayRun });
    const low = [b.run(rowsOf([1]), 'batch'), b.run(rowsOf([2]), 'batch')];
    clock.advance(50);
    assert.equal(batches.length, 0, 'a full low batch waits');
    const live = b.run(rowsOf([3]));
    clock.advance(5);
    assert.equal(batches.length, 1, 'live calls run meanwhile');
    batches[0].release();
    await live;
    assert.equal(batches.length, 1);
    mayRun = true;
    b.poke();
    assert.equal(batches.length, 2);
    batches[1].release();
    await Promise.all(low);
  });

  it('takes back a call still waiting when its signal aborts; a running one finishes; onStart says when a batch starts', async () => {
    const clock = new FakeClock();
    const { batches, execute } = recorder();
    let mayRun = false;
    const b = new DynamicBatcher({ maxBatchSize: 4, maxDelayMs: 5, execute, clock, batchMayRun: () => mayRun });
    const held = new AbortController();
    const started: number[] = [];
    const taken = b.run(rowsOf([1]), 'batch', { signal: held.signal, onStart: () => started.push(1) });
    const kept = b.run(rowsOf([2]), 'batch', { onStart: () => started.push(2) });
    clock.advance(50);
    assert.equal(b.pending('batch'), 2, 'both wait while live requests run');
    held.abort(new Error('handler ran past its budget'));
    await assert.rejects(taken, /ran past its budget/);
    assert.equal(b.pending('batch'), 1, 'the aborted call left its group');
    mayRun = true;
    b.poke();
    clock.advance(5);
    assert.equal(batches.length, 1);
    assert.deepEqual([...batches[0].dims], [1, 2], 'the batch holds only the call still wanted');
    assert.deepEqual(started, [2]);
    batches[0].release();
    assert.deepEqual([...((await kept).outputs.y.data as Float32Array)], [4, 4]);
    const running = new AbortController();
    const late = b.run(rowsOf([3]), 'live', { signal: running.signal, onStart: () => started.push(3) });
    clock.advance(5);
    assert.deepEqual(started, [2, 3]);
    running.abort(new Error('too late'));
    batches[1].release();
    assert.deepEqual([...((await late).outputs.y.data as Float32Array)], [6, 6], 'a call whose batch started is not taken back');
    await assert.rejects(b.run(rowsOf([4]), 'live', { signal: running.signal }), /too late/, 'an aborted signal refuses a new call');
  });

  it('caps the calls of a low-priority inference at batchMaxCalls', async () => {
    const clock = new FakeClock();
    const { batches, execute } = recorder();
    const b = new DynamicBatcher({ maxBatchSize: 8, maxDelayMs: 5, execute, clock, batchMaxCalls: 1 });
    const low = [1, 2, 3].map((v) => b.run(rowsOf([v]), 'batch'));
    assert.deepEqual([...batches[0].dims], [1, 2]);
    for (let i = 0; i < 3; i++) {
      batches[i].release();
      await low[i];
    }
    assert.equal(batches.length, 3, 'one call per low inference');
    const live = [4, 5].map((v) => b.run(rowsOf([v])));
    clock.advance(5);
    assert.deepEqual([...batches[3].dims], [2, 2], 'live calls still batch together');
    batches[3].release();
    await Promise.all(live);
  });

  it('refuses bad options and feeds without rows', async () => {
    assert.throws(() => new DynamicBatcher({ maxBatchSize: 0, maxDelayMs: 1, execute: async () => ({ outputs: {}, inferMs: 0 }) }), /maxBatchSize/);
    const b = new DynamicBatcher({ maxBatchSize: 2, maxDelayMs: 1, execute: async () => ({ outputs: {}, inferMs: 0 }) });
    await assert.rejects(b.run({}), /batch dimension/);
  });
});

describe('LiveFirst', () => {
  it('closes while live requests run and stays closed yieldMs after the last', () => {
    const clock = new FakeClock();
    const gate = new LiveFirst({ yieldMs: 20, clock, refreshMs: 1000 });
    let opened = 0;
    gate.onOpen(() => opened++);
    assert.equal(gate.open, true);
    gate.liveStarted();
    gate.liveStarted();
    assert.equal(gate.open, false);
    gate.liveEnded();
    clock.advance(50);
    assert.equal(gate.open, false, 'one live request is still in');
    assert.equal(opened, 0);
    gate.liveEnded();
    clock.advance(19);
    assert.equal(gate.open, false, 'within yieldMs of the last live request');
    gate.liveStarted();
    clock.advance(5);
    gate.liveEnded();
    clock.advance(19);
    assert.equal(opened, 0, 'a live request inside the window restarts it');
    clock.advance(1);
    assert.equal(gate.open, true);
    assert.equal(opened, 1);
    assert.deepEqual(gate.stats, { yields: 1, heldMs: 94 });
  });

  it('announces busy and idle to the node, and stays closed while a peer is busy', () => {
    const clock = new FakeClock();
    const said: boolean[] = [];
    const gate = new LiveFirst({ yieldMs: 10, clock, refreshMs: 100, announce: (busy) => said.push(busy) });
    let opened = 0;
    gate.onOpen(() => opened++);
    gate.liveStarted();
    for (let i = 0; i < 5; i++) clock.advance(50);
    assert.deepEqual(said, [true, true, true], 'busy, then refreshed while busy');
    gate.liveEnded();
    clock.advance(10);
    assert.deepEqual(said, [true, true, true, false]);
    assert.equal(opened, 1);
    assert.equal(gate.peersLive, false);
    gate.peer('other', true);
    assert.equal(gate.open, false, 'a busy peer closes the gate');
    assert.equal(gate.peersLive, true, 'a lone request here is not alone on the node');
    gate.peer('other', false);
    assert.equal(gate.peersLive, false);
    assert.equal(gate.open, false, 'a peer going idle opens the gate yieldMs later (another may have just gone busy)');
    clock.advance(10);
    assert.equal(gate.open, true);
    assert.equal(opened, 2);
    gate.peer('dead', true);
    clock.advance(299);
    assert.equal(gate.open, false);
    clock.advance(1);
    assert.equal(gate.open, true, 'a peer that stops announcing expires after 3 × refreshMs');
    assert.equal(opened, 3);
  });
});

describe('BatchTuner', () => {
  /** Feeds the tuner batches of each size the cap allows, with a cost per row given by the model. */
  const drive = (t: BatchTuner, msPerRow: (rows: number) => number, batches: number, offered = 16) => {
    const caps: number[] = [];
    for (let i = 0; i < batches; i++) {
      const rows = Math.min(t.cap, offered);
      caps.push(t.cap);
      t.observe(rows, rows * msPerRow(rows), 1);
    }
    return caps;
  };

  it('lets load decide until it has measured something', () => {
    assert.equal(new BatchTuner({ maxBatchSize: 16 }).cap, 16);
  });

  it('settles on small batches for a model whose cost per row grows with the batch (CPU recogniser)', () => {
    const t = new BatchTuner({ maxBatchSize: 16, exploreEvery: 64 });
    // Measured on these machines: 23 ms per row alone, 33 ms per row at 16.
    const cost = (rows: number) => 23 + (10 * (rows - 1)) / 15;
    // Low load first: single-row batches teach it what one row costs.
    for (let i = 0; i < 3; i++) t.observe(1, 23);
    const caps = drive(t, cost, 200);
    assert.equal(caps.at(-1), 1);
    // It still re-measures the next size now and then, and comes back.
    const late = caps.slice(100);
    assert.ok(late.includes(2) && late.filter((c) => c === 1).length > late.length * 0.9, JSON.stringify(late));
  });

  it('under steady load, shrinks batches to measure the smaller sizes itself', () => {
    const t = new BatchTuner({ maxBatchSize: 16 });
    // Every batch full from the start: no small batch ever happens by itself.
    const caps = drive(t, (rows) => 23 + (10 * (rows - 1)) / 15, 100, 16);
    assert.equal(caps[0], 16);
    assert.equal(caps.at(-1), 1);
  });

  it('never aims below the smallest call it has seen (calls are never split)', () => {
    const t = new BatchTuner({ maxBatchSize: 16 });
    // Every call carries 3 rows: a batch of 1 or 2 rows cannot happen.
    for (let i = 0; i < 100; i++) {
      const rows = Math.max(3, Math.floor(Math.min(t.cap, 16) / 3) * 3);
      t.observe(rows, rows * 5, 3);
    }
    assert.ok(t.cap >= 3, `cap ${t.cap}`);
  });

  it('climbs to maxBatchSize for a model whose cost per row falls with the batch (GPU)', () => {
    const t = new BatchTuner({ maxBatchSize: 16 });
    for (let i = 0; i < 3; i++) t.observe(1, 5);
    const caps = drive(t, (rows) => 5 / Math.sqrt(rows), 100);
    assert.equal(caps.at(-1), 16);
  });

  it('prefers the smaller batch when a larger one is not clearly cheaper', () => {
    const t = new BatchTuner({ maxBatchSize: 8, exploreEvery: 1000 });
    for (let i = 0; i < 3; i++) t.observe(1, 10);
    const caps = drive(t, (rows) => (rows === 1 ? 10 : 9.8), 60);
    assert.equal(caps.at(-1), 1);
  });

  it('measures a size again once its cost is stale (a slow start does not rule it out for good)', () => {
    const t = new BatchTuner({ maxBatchSize: 4, exploreEvery: 16 });
    // The first single-row runs were slow (other instances loading); later, one row costs 10 ms
    // alone and 12 ms per row in pairs.
    for (let i = 0; i < 3; i++) t.observe(1, 50);
    const caps = drive(t, (rows) => (rows === 1 ? 10 : 12), 200);
    assert.equal(caps.slice(0, 10).includes(1), false, 'size 1 looks dear at first');
    assert.equal(caps.at(-1), 1, JSON.stringify(caps));
    assert.equal(t.snapshot()['1'].msPerRow, 10);
  });

  it('re-measures the sizes next to the cap one batch at a time (a GPU at its largest size loses little)', () => {
    const t = new BatchTuner({ maxBatchSize: 32, exploreEvery: 64 });
    for (let i = 0; i < 3; i++) t.observe(1, 5);
    const caps = drive(t, (rows) => 5 / Math.sqrt(rows), 2_000, 32);
    const late = caps.slice(1_000);
    assert.equal(late.filter((c) => c !== 32).length, late.filter((_, i) => (1_000 + i) % 64 === 0).length, 'one batch in 64 off the cap');
    assert.ok(late.every((c) => c === 32 || c === 16), JSON.stringify([...new Set(late)]));
  });

  it('caps what the batcher gathers under load', async () => {
    // An executor that reports 10 ms per row alone and 20 per row in company.
    const sizes: number[] = [];
    const execute = async (feeds: Feeds) => {
      const rows = feeds.x.dims[0];
      sizes.push(rows);
      return { outputs: { y: feeds.x }, inferMs: rows === 1 ? 10 : 20 * rows };
    };
    const b = new DynamicBatcher({ maxBatchSize: 8, maxDelayMs: 0, execute });
    const run = () => b.run({ x: tensor('float32', new Float32Array(4), [1, 4]) });
    await run(); // alone: one row measured
    for (let i = 0; i < 3; i++) await run();
    for (let round = 0; round < 10; round++) await Promise.all(Array.from({ length: 8 }, run));
    assert.equal(b.stats.cap, 1);
    assert.ok(sizes.slice(-16).every((n) => n === 1), JSON.stringify(sizes));
    assert.ok(b.stats.costPerRow['1'].samples > 0);
  });
});
