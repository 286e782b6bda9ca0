// The rollout's judgement over scripted windows: no Redis, no clock but the one given.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { DEFAULT_ROLLOUT_THRESHOLDS, judgeRollout, judgeWarmup, windowOf, type RolloutWindow, type WindowStats } from '../../scheduler/rollout-judge.ts';
import { seriesPoint } from '../../core/series.ts';
import { ROLLOUT_STEPS } from '../../core/traffic.ts';

const t = { ...DEFAULT_ROLLOUT_THRESHOLDS, stepMs: 60_000, minRequests: 100 };
const healthy: WindowStats = { requests: 900, serverErrors: 1, p99Ms: 40 };
const at = (o: Partial<RolloutWindow> & { fresh?: WindowStats }): RolloutWindow => ({
  old: healthy,
  new: o.fresh ?? { requests: 100, serverErrors: 0, p99Ms: 45 },
  versions: { old: 'v2', new: 'v3' },
  step: 0,
  steps: ROLLOUT_STEPS,
  stepStartedAt: 0,
  now: 61_000,
  ...o,
});

describe('judging a rollout step', () => {
  it('waits while the new version has served too few requests, even failing ones', () => {
    const v = judgeRollout(at({ fresh: { requests: 99, serverErrors: 99, p99Ms: 10_000 } }), t);
    assert.equal(v.action, 'wait');
    assert.match(v.reason, /99 of the 100 requests/);
  });

  it('rolls back at once when its error rate is worse beyond the bound, before the step is over', () => {
    const v = judgeRollout(at({ now: 1_000, fresh: { requests: 100, serverErrors: 3, p99Ms: 40 } }), t);
    assert.equal(v.action, 'roll_back');
    assert.match(v.reason, /v3 answered 3 % of 100 requests with a server error, against 0.1 % for v2/);
  });

  it('allows an error rate within the bound of the old one', () => {
    const old = { requests: 1000, serverErrors: 50, p99Ms: 40 };
    assert.equal(judgeRollout(at({ old, fresh: { requests: 100, serverErrors: 5, p99Ms: 40 } }), t).action, 'promote');
    assert.equal(judgeRollout(at({ old, fresh: { requests: 100, serverErrors: 7, p99Ms: 40 } }), t).action, 'roll_back');
  });

  it('rolls back when its p99 is worse beyond ratio and slack', () => {
    // 40 × 1.5 + 50 = 110 ms allowed.
    assert.equal(judgeRollout(at({ fresh: { requests: 200, serverErrors: 0, p99Ms: 110 } }), t).action, 'promote');
    const v = judgeRollout(at({ fresh: { requests: 200, serverErrors: 0, p99Ms: 250 } }), t);
    assert.equal(v.action, 'roll_back');
    assert.match(v.reason, /p99 was 250 ms, against 40 ms for v2 \(at most 110 ms\)/);
  });

  it('without a baseline (the old version served too few), judges errors against none and skips p99', () => {
    const old = { requests: 3, serverErrors: 0, p99Ms: 5 };
    assert.equal(judgeRollout(at({ old, fresh: { requests: 100, serverErrors: 0, p99Ms: 900 } }), t).action, 'promote');
    assert.equal(judgeRollout(at({ old, fresh: { requests: 100, serverErrors: 2, p99Ms: 5 } }), t).action, 'roll_back');
  });

  it('waits for the step to last its time when all is well, then promotes to the next step', () => {
    assert.equal(judgeRollout(at({ now: 59_999 }), t).action, 'wait');
    assert.deepEqual(judgeRollout(at({ now: 60_000 }), t).action, 'promote');
    const v = judgeRollout(at({}), t);
    assert.ok(v.action === 'promote' && v.step === 1);
  });

  it('is done when the next step is the last (100 %): the new version becomes active', () => {
    const v = judgeRollout(at({ step: 1 }), t);
    assert.equal(v.action, 'done');
    assert.match(v.reason, /v3 stayed within bounds of v2 over 100 requests/);
  });

  it('reads a window from per-minute points: requests, server errors (not 4xx) and p99 over them', () => {
    const minute = (requests: number, errors: number, server: number, lat: Record<number, number>) =>
      seriesPoint(0, { requests: String(requests), errors: String(errors), server_errors: String(server), ...Object.fromEntries(Object.entries(lat).map(([b, n]) => [`lat_${b}`, String(n)])) });
    const w = windowOf([minute(60, 10, 2, { 3: 60 }), minute(40, 0, 1, { 3: 39, 6: 1 })]);
    assert.equal(w.requests, 100);
    assert.equal(w.serverErrors, 3);
    assert.ok(w.p99Ms !== null && w.p99Ms > 5 && w.p99Ms <= 50, String(w.p99Ms));
  });

  it('before its first step, waits for a ready replica, and rolls back when it cannot start', () => {
    assert.equal(judgeWarmup({ version: 'v3', ready: 0 }).action, 'wait');
    assert.deepEqual(judgeWarmup({ version: 'v3', ready: 1 }), { action: 'promote', step: 0, reason: 'v3 has a replica ready' });
    assert.deepEqual(judgeWarmup({ version: 'v3', ready: 0, startFailure: { phase: 'setup', message: 'no license' } }), { action: 'roll_back', reason: 'v3 could not start: setup failed: no license' });
  });
});
