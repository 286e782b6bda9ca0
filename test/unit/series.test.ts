// The console's per-minute roll-ups: latency buckets, quantiles and totals, without Redis.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { LATENCY_BOUNDS_MS, latencyBucket, minuteKey, minuteOf, quantile, seriesPoint, summarize } from '../../core/series.ts';

const empty = () => LATENCY_BOUNDS_MS.map(() => 0).concat(0);

describe('per-minute series', () => {
  it('puts a latency in the first bucket whose bound holds it, and what is not a number in the first', () => {
    assert.equal(latencyBucket(0.4), 0);
    assert.equal(latencyBucket(1), 0);
    assert.equal(latencyBucket(1.01), 1);
    assert.equal(latencyBucket(60_000), LATENCY_BOUNDS_MS.length - 1);
    assert.equal(latencyBucket(60_001), LATENCY_BOUNDS_MS.length);
    assert.equal(latencyBucket(Number.NaN), 0);
    assert.equal(latencyBucket(-5), 0);
  });

  it('interpolates a quantile within its bucket, as histogram_quantile does', () => {
    const b = empty();
    assert.equal(quantile(b, 0.5), null);
    b[4] = 10; // (10, 25] ms
    assert.equal(quantile(b, 0.5), 17.5);
    assert.equal(quantile(b, 1), 25);
    b[0] = 10; // [0, 1] ms: half the requests now
    assert.equal(quantile(b, 0.25), 0.5);
    assert.equal(quantile(b, 0.99), 24.7);
    const slow = empty();
    slow[LATENCY_BOUNDS_MS.length] = 3;
    assert.equal(quantile(slow, 0.5), 60_000, 'beyond the last bound: its lower bound');
  });

  it('reads a minute from its hash, and says when the scheduler did not look', () => {
    const at = Date.parse('2026-11-28T02:19:00Z');
    const p = seriesPoint(at, { requests: '4', errors: '1', server_errors: '1', cold_starts: '1', compute_ms: '40.5', queue_ms: '8', lat_3: '3', lat_6: '1', depth: '2', ready: '1' });
    assert.equal(p.at, '2026-11-28T02:19:00.000Z');
    assert.deepEqual([p.requests, p.errors, p.serverErrors, p.coldStarts, p.computeMs, p.queueMs, p.depth, p.ready], [4, 1, 1, 1, 40.5, 2, 2, 1]);
    assert.equal(p.latency[3], 3);
    assert.equal(p.p50Ms, 8.33);
    const idle = seriesPoint(at, {});
    assert.deepEqual([idle.requests, idle.p50Ms, idle.depth, idle.ready], [0, null, null, null]);
  });

  it('sums minutes, quantiles from their summed buckets', () => {
    const at = Date.parse('2026-11-28T02:00:00Z');
    const points = [seriesPoint(at, { requests: '9', lat_0: '9' }), seriesPoint(at + 60_000, {}), seriesPoint(at + 120_000, { requests: '1', errors: '1', cold_starts: '1', lat_10: '1' })];
    const s = summarize(points);
    assert.deepEqual({ ...s }, { requests: 10, perSecond: 0.06, errors: 1, coldStarts: 1, p50Ms: 0.56, p99Ms: 2350 });
  });

  it('keys a record by the UTC minute it was written in', () => {
    assert.equal(minuteOf(Date.parse('2026-11-28T23:59:59.999Z')), '202611282359');
    assert.equal(minuteKey('t.fn', '2026-11-28T02:19:30.123Z'), 'embers:series:t.fn:202611280219');
    assert.equal(minuteKey('t.fn', '2026-11-28T03:19:30+01:00'), 'embers:series:t.fn:202611280219');
  });
});
