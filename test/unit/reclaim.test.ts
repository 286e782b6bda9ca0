// Room for work with no replica, reclaimed from replicas that hold none.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { reclaim, type FunctionView } from '../../scheduler/reclaim.ts';

const NOW = 1_000_000;
const fn = (name: string, o: Partial<FunctionView> = {}): FunctionView => ({ fn: name, desired: 1, wanted: 1, minReplicas: 0, inFlight: 0, lastActiveAt: NOW - 10_000, ...o });
const waiting = (name: string, inFlight = 1): FunctionView => fn(name, { desired: 0, wanted: 1, inFlight, lastActiveAt: NOW });

describe('reclaim', () => {
  it('N + 1 functions on room for N: the least recently used idle replica makes room', () => {
    const r = reclaim([fn('a', { lastActiveAt: NOW - 5_000 }), fn('b', { lastActiveAt: NOW - 50_000 }), fn('c', { lastActiveAt: NOW - 1_000 }), fn('d', { lastActiveAt: NOW - 20_000 }), waiting('e')], 4, NOW);
    assert.deepEqual(r.moves, [{ from: 'b', to: 'e' }]);
    assert.deepEqual(r.desired, { a: 1, b: 0, c: 1, d: 1, e: 1 });
  });

  it('never takes a replica from a function with work', () => {
    const r = reclaim([fn('busy', { inFlight: 3, lastActiveAt: NOW - 1e9 }), fn('idle', { lastActiveAt: NOW }), waiting('e')], 2, NOW);
    assert.deepEqual(r.moves, [{ from: 'idle', to: 'e' }]);
    const allBusy = reclaim([fn('x', { inFlight: 1 }), fn('y', { inFlight: 2 }), waiting('e')], 2, NOW);
    assert.deepEqual(allBusy.moves, [], 'every slot runs requests: the work waits in its queue');
    assert.equal(allBusy.desired.e, 0);
  });

  it('never takes a function below its minReplicas', () => {
    const r = reclaim([fn('pinned', { minReplicas: 1, lastActiveAt: NOW - 1e9 }), fn('idle', { lastActiveAt: NOW }), waiting('e')], 2, NOW);
    assert.deepEqual(r.moves, [{ from: 'idle', to: 'e' }]);
    assert.deepEqual(reclaim([fn('pinned', { minReplicas: 1 }), waiting('e')], 1, NOW).moves, []);
  });

  it('uses free slots before reclaiming anything', () => {
    const r = reclaim([fn('a'), waiting('e')], 2, NOW);
    assert.deepEqual(r.moves, []);
    assert.deepEqual(r.desired, { a: 1, e: 1 });
  });

  it('prefers the replica whose next request is predicted latest', () => {
    const r = reclaim([fn('periodic', { lastActiveAt: NOW - 60_000, expectedAt: NOW + 1_000 }), fn('rare', { lastActiveAt: NOW - 5_000, expectedAt: NOW + 3_600_000 }), waiting('e')], 2, NOW);
    assert.deepEqual(r.moves, [{ from: 'rare', to: 'e' }]);
  });

  it('gives every waiting function one, busiest queue first, and takes one replica at a time', () => {
    const r = reclaim([fn('big', { desired: 3, wanted: 3, lastActiveAt: NOW - 100_000 }), waiting('p', 1), waiting('q', 9)], 3, NOW);
    assert.deepEqual(r.moves, [
      { from: 'big', to: 'q' },
      { from: 'big', to: 'p' },
    ]);
    assert.deepEqual(r.desired, { big: 1, p: 1, q: 1 });
  });

  it('leaves functions that do not want a replica alone', () => {
    const r = reclaim([fn('a'), fn('min0', { desired: 0, wanted: 0, inFlight: 0 })], 1, NOW);
    assert.deepEqual(r.moves, []);
    assert.deepEqual(r.desired, { a: 1, min0: 0 });
  });
});
