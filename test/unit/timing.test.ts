import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { newCallTimes, splitTiming, unrunTiming } from '../../runtime/channel/timing.ts';

describe('request timing split (compute input, infer, compute output)', () => {
  it('input runs to the first model call and output from the last answer', () => {
    // Taken at 100; det called at 104, answered at 114; rec called at 117, answered at 147; done at
    // 150. The rec run was a batch of which this request's share is less than the run.
    const t = splitTiming(2, 100, 150, { ...newCallTimes(), firstAt: 104, lastEndAt: 147, inferMs: 30, execMs: 38, batchMs: 1.5 });
    assert.deepEqual(t, { queueMs: 2, handlerMs: 50, inferMs: 30, execMs: 38, batchMs: 1.5, inputMs: 4, outputMs: 3 });
  });

  it('a handler that calls no model is all compute input', () => {
    assert.deepEqual(splitTiming(0, 10, 10.25, newCallTimes()), { queueMs: 0, handlerMs: 0.25, inferMs: 0, execMs: 0, batchMs: 0, inputMs: 0.25, outputMs: 0 });
  });

  it('a call still unanswered when the handler ended (timed out, or not awaited) leaves no output time', () => {
    const none = splitTiming(0, 0, 30, { ...newCallTimes(), firstAt: 5, pending: 1 });
    assert.deepEqual([none.inputMs, none.outputMs], [5, 0]);
    // det answered at 12; rec, called at 14, still running at the timeout (30).
    const timedOut = splitTiming(0, 0, 30, { ...newCallTimes(), firstAt: 5, lastEndAt: 12, pending: 1, execMs: 7 });
    assert.equal(timedOut.outputMs, 0);
    // A call answered after the handler returned (not awaited).
    assert.equal(splitTiming(0, 0, 30, { ...newCallTimes(), firstAt: 5, lastEndAt: 31, execMs: 20 }).outputMs, 0);
  });

  it('a request answered without running has a queue time and zeros', () => {
    assert.deepEqual(unrunTiming(12), { queueMs: 12, handlerMs: 0, inferMs: 0, execMs: 0, batchMs: 0, inputMs: 0, outputMs: 0 });
  });
});
