// What a replica knows of the runs it sent its user code: a live run past its time is taken (the
// replica answers it), and its late messages are taken once, not read as a violation.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { RunsInFlight } from '../../runtime/replica/runs-in-flight.ts';

const slot = (rid: string, answerBy?: number) => ({ resolve: () => {}, rid, chunksLeft: 8, answerBy, timeoutMs: answerBy === undefined ? undefined : 1000 });

describe('RunsInFlight', () => {
  it('finds live runs past their time, leaves batch lines and runs still in time', () => {
    const runs = new RunsInFlight();
    runs.add(1, slot('live-early', 1_000));
    runs.add(2, slot('batch'));
    runs.add(3, slot('live-late', 5_000));
    assert.deepEqual(runs.due(999), []);
    assert.deepEqual(runs.due(1_000), [1]);
    assert.deepEqual(runs.due(1e9), [1, 3]);
    assert.equal(runs.timeOut(1)?.rid, 'live-early');
    assert.equal(runs.size, 2);
    assert.equal(runs.get(1), undefined);
    assert.equal(runs.timeOut(1), undefined);
    assert.deepEqual(runs.due(1e9), [3]);
    assert.deepEqual(runs.takeAll().map((r) => r.rid), ['batch', 'live-late']);
    assert.equal(runs.size, 0);
  });

  it('remembers a run answered at its timeout until its late result comes, once', () => {
    const runs = new RunsInFlight();
    runs.add(7, slot('hung', 10));
    runs.timeOut(7);
    assert.equal(runs.wasTimedOut(7), true);
    assert.equal(runs.forgetTimedOut(7), true);
    assert.equal(runs.forgetTimedOut(7), false, 'a second result for it is a violation');
    assert.equal(runs.wasTimedOut(8), false);
  });

  it('keeps a bounded memory of timed-out runs', () => {
    const runs = new RunsInFlight();
    for (let n = 1; n <= 1000; n++) runs.add(n, slot(`r${n}`, 0));
    for (const n of runs.due(1)) runs.timeOut(n);
    assert.equal(runs.wasTimedOut(1), false, 'the oldest are forgotten');
    assert.equal(runs.wasTimedOut(1000), true);
  });
});
