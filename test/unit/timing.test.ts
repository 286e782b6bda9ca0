import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { splitTiming } from '../../runtime/timing.ts';

describe('request timing split (compute input, infer, compute output)', () => {
  it('input runs to the first model call and output from the last answer', () => {
    // Taken at 100; det called at 104, answered at 114; rec called at 117, answered at 147; done at
    // 150. The rec run was a batch of which this request's share is less than the run.
    const t = splitTiming(2, 100, 150, { firstAt: 104, lastEndAt: 147, inferMs: 30, execMs: 38, batchMs: 1.5 });
    assert.deepEqual(t, { queueMs: 2, handlerMs: 50, inferMs: 30, execMs: 38, batchMs: 1.5, inputMs: 4, outputMs: 3 });
  });

  it('a handler that calls no model is all compute input', () => {
    assert.deepEqual(splitTiming(0, 10, 10.25, { inferMs: 0, execMs: 0, batchMs: 0 }), { queueMs: 0, handlerMs: 0.25, inferMs: 0, execMs: 0, batchMs: 0, inputMs: 0.25, outputMs: 0 });
  });

  it('a call still running when the handler ended (not awaited, or timed out) leaves no output time', () => {
    const t = splitTiming(0, 0, 30, { firstAt: 5, inferMs: 0, execMs: 0, batchMs: 0 });
    assert.equal(t.inputMs, 5);
    assert.equal(t.outputMs, 0);
    const late = splitTiming(0, 0, 30, { firstAt: 5, lastEndAt: 31, inferMs: 20, execMs: 20, batchMs: 0 });
    assert.equal(late.outputMs, 0);
  });
});
