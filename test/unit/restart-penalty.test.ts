// A function whose user code keeps breaking its channel waits longer each time to be replaced,
// and is forgiven after five quiet minutes.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { RestartPenalty } from '../../scheduler/restart-penalty.ts';
import type { Clock } from '../../core/clock.ts';

const clockAt = (t: { now: number }): Clock => ({ now: () => t.now, setTimeout: () => 0, clearTimeout: () => {} });

describe('RestartPenalty', () => {
  it('doubles the wait with each break up to a minute, per function, and forgets after five quiet minutes', () => {
    const t = { now: 0 };
    const p = new RestartPenalty({ clock: clockAt(t) });
    assert.deepEqual([1, 2, 3, 4, 5, 6, 7, 8].map(() => p.record('flood@v1')), [1000, 2000, 4000, 8000, 16000, 32000, 60000, 60000]);
    assert.equal(p.waiting('flood@v1'), true);
    assert.equal(p.waiting('echo@v1'), false, 'other functions never wait');
    t.now += 60_000;
    assert.equal(p.waiting('flood@v1'), false);
    t.now += 300_000;
    assert.equal(p.record('flood@v1'), 1000);
  });
});
