// Room for work, reclaimed from replicas that hold none: slots cap replicas running requests,
// memory caps every replica.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { reclaim, type FunctionView } from '../../scheduler/reclaim.ts';

const NOW = 1_000_000;
const MB = 2 ** 20;
const fn = (name: string, o: Partial<FunctionView> = {}): FunctionView => ({ fn: name, desired: 1, wanted: 1, minReplicas: 0, inFlight: 0, lastActiveAt: NOW - 10_000, footprint: 100 * MB, ...o });
const waiting = (name: string, inFlight = 1, o: Partial<FunctionView> = {}): FunctionView => fn(name, { desired: 0, wanted: 1, inFlight, lastActiveAt: NOW, ...o });
/** Room for `n` replicas of 100 MB, and plenty of slots. */
const memoryFor = (n: number) => ({ slots: 64, memoryBytes: n * 100 * MB });

describe('reclaim', () => {
  it('N + 1 functions on memory for N: the least recently used idle replica makes room', () => {
    const r = reclaim([fn('a', { lastActiveAt: NOW - 5_000 }), fn('b', { lastActiveAt: NOW - 50_000 }), fn('c', { lastActiveAt: NOW - 1_000 }), fn('d', { lastActiveAt: NOW - 20_000 }), waiting('e')], memoryFor(4), NOW);
    assert.deepEqual(r.moves, [{ from: 'b', to: 'e' }]);
    assert.deepEqual(r.desired, { a: 1, b: 0, c: 1, d: 1, e: 1 });
  });

  it('idle replicas hold no slot: many stay warm on few slots while memory lasts', () => {
    const idle = Array.from({ length: 20 }, (_, i) => fn(`f${i}`, { footprint: 10 * MB }));
    const r = reclaim([...idle, waiting('e')], { slots: 2, memoryBytes: 1024 * MB }, NOW);
    assert.deepEqual(r.moves, []);
    assert.equal(r.desired.e, 1);
    assert.equal(Object.values(r.desired).reduce((a, n) => a + n, 0), 21);
  });

  it('takes as many small replicas as a large one needs', () => {
    const r = reclaim([fn('s1', { footprint: 50 * MB, lastActiveAt: NOW - 9_000 }), fn('s2', { footprint: 50 * MB, lastActiveAt: NOW - 8_000 }), fn('s3', { footprint: 50 * MB, lastActiveAt: NOW - 1_000 }), waiting('large', 1, { footprint: 100 * MB })], { slots: 4, memoryBytes: 150 * MB }, NOW);
    assert.deepEqual(r.moves, [
      { from: 's1', to: 'large' },
      { from: 's2', to: 'large' },
    ]);
  });

  it('never takes a replica from a function with work', () => {
    const r = reclaim([fn('busy', { inFlight: 3, lastActiveAt: NOW - 1e9 }), fn('idle', { lastActiveAt: NOW }), waiting('e')], memoryFor(2), NOW);
    assert.deepEqual(r.moves, [{ from: 'idle', to: 'e' }]);
    const allBusy = reclaim([fn('x', { inFlight: 1 }), fn('y', { inFlight: 2 }), waiting('e')], { slots: 2, memoryBytes: Infinity }, NOW);
    assert.deepEqual(allBusy.moves, [], 'every slot runs requests: the work waits in its queue');
    assert.equal(allBusy.desired.e, 0);
  });

  it('gives work its first replica when only functions with work hold the memory', () => {
    const r = reclaim([fn('busy', { inFlight: 1 }), waiting('e')], memoryFor(1), NOW);
    assert.deepEqual(r.moves, []);
    assert.equal(r.desired.e, 1, 'over the budget rather than waiting on memory that frees only when busy ends');
  });

  it('never takes a function below its minReplicas', () => {
    const r = reclaim([fn('pinned', { minReplicas: 1, lastActiveAt: NOW - 1e9 }), fn('idle', { lastActiveAt: NOW }), waiting('e')], memoryFor(2), NOW);
    assert.deepEqual(r.moves, [{ from: 'idle', to: 'e' }]);
    assert.deepEqual(reclaim([fn('pinned', { minReplicas: 1 }), waiting('e')], memoryFor(1), NOW).moves, []);
  });

  it('uses free memory before reclaiming anything', () => {
    const r = reclaim([fn('a'), waiting('e')], memoryFor(2), NOW);
    assert.deepEqual(r.moves, []);
    assert.deepEqual(r.desired, { a: 1, e: 1 });
  });

  it('prefers the replica whose next request is predicted latest', () => {
    const r = reclaim([fn('periodic', { lastActiveAt: NOW - 60_000, expectedAt: NOW + 1_000 }), fn('rare', { lastActiveAt: NOW - 5_000, expectedAt: NOW + 3_600_000 }), waiting('e')], memoryFor(2), NOW);
    assert.deepEqual(r.moves, [{ from: 'rare', to: 'e' }]);
  });

  it('gives every waiting function one, busiest queue first, and takes one replica at a time', () => {
    const r = reclaim([fn('big', { desired: 3, wanted: 3, lastActiveAt: NOW - 100_000 }), waiting('p', 1), waiting('q', 9)], memoryFor(3), NOW);
    assert.deepEqual(r.moves, [
      { from: 'big', to: 'q' },
      { from: 'big', to: 'p' },
    ]);
    assert.deepEqual(r.desired, { big: 1, p: 1, q: 1 });
  });

  it('makes memory for the extra replicas a function with work was given', () => {
    const r = reclaim([fn('hot', { desired: 3, wanted: 3, inFlight: 12 }), fn('idle1', { lastActiveAt: NOW - 1_000 }), fn('idle2', { lastActiveAt: NOW - 90_000 })], memoryFor(4), NOW);
    assert.deepEqual(r.moves, [{ from: 'idle2', to: 'hot' }]);
  });

  it('leaves functions that do not want a replica alone', () => {
    const r = reclaim([fn('a'), fn('min0', { desired: 0, wanted: 0, inFlight: 0 })], memoryFor(1), NOW);
    assert.deepEqual(r.moves, []);
    assert.deepEqual(r.desired, { a: 1, min0: 0 });
  });
});
