// The learned keep-alive (hybrid histogram policy) against fixed windows, over scripted arrival
// traces: periodic, bursty, rare, Poisson and drifting.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { IDLE_TIMES_KEPT, MIN_IDLE_TIMES, UNLEARNED_KEEP_ALIVE_MS, keepAliveWindow, recordIdle, replayKeepAlive, warmAt } from '../../scheduler/keep-alive.ts';

const S = 1000;
const BOUND = 600 * S;
const auto = (idle: readonly number[]) => keepAliveWindow(idle, BOUND);
const fixed = (ms: number) => () => ({ prewarmMs: 0, keepAliveMs: ms, why: 'fixed' as const });
const LEAD = 3 * S;

/** Deterministic pseudo-random numbers in [0, 1). */
function rng(seed: number): () => number {
  let x = seed >>> 0 || 1;
  return () => ((x = (x * 1664525 + 1013904223) >>> 0) / 2 ** 32);
}
const every = (periodMs: number, n: number, start = 0) => Array.from({ length: n }, (_, i) => start + i * periodMs);
function poisson(meanMs: number, n: number, seed = 7): number[] {
  const r = rng(seed);
  let t = 0;
  return Array.from({ length: n }, () => (t += -Math.log(1 - r()) * meanMs));
}
const all = (arrivals: number[]) => ({ auto: replayKeepAlive(arrivals, auto, LEAD), f60: replayKeepAlive(arrivals, fixed(60 * S), LEAD), f600: replayKeepAlive(arrivals, fixed(BOUND), LEAD) });

describe('keepAliveWindow', () => {
  it('is a short window until it has seen enough idle times, or the one the user gave', () => {
    assert.deepEqual(keepAliveWindow([], BOUND), { prewarmMs: 0, keepAliveMs: UNLEARNED_KEEP_ALIVE_MS, why: 'unlearned' });
    assert.deepEqual(keepAliveWindow(new Array(MIN_IDLE_TIMES - 1).fill(10 * S), BOUND, 90 * S), { prewarmMs: 0, keepAliveMs: 90 * S, why: 'unlearned' });
    assert.equal(keepAliveWindow([], 2 * S).keepAliveMs, 2 * S, 'never past the bound');
  });

  it('treats a few idle times all past the bound as rare: no keep-alive, a pre-warm before the next', () => {
    const k = keepAliveWindow([40 * 60 * S, 50 * 60 * S], BOUND);
    assert.equal(k.why, 'rare');
    assert.ok(k.prewarmMs > BOUND, JSON.stringify(k));
    assert.equal(keepAliveWindow([40 * 60 * S], BOUND).why, 'unlearned', 'one gap is not enough to call it rare');
  });

  it('falls back to the bound when idle times show no pattern', () => {
    const r = rng(3);
    const spread = Array.from({ length: IDLE_TIMES_KEPT }, () => r() * BOUND);
    assert.equal(keepAliveWindow(spread, BOUND).why, 'fixed');
  });

  it('keeps a ring of the newest idle times', () => {
    let ring: number[] = [];
    for (let i = 0; i < IDLE_TIMES_KEPT + 10; i++) ring = recordIdle(ring, i);
    assert.equal(ring.length, IDLE_TIMES_KEPT);
    assert.equal(ring[0], 10);
  });

  it('starts a pre-warm early by the lead time, and never before the last request', () => {
    const k = { prewarmMs: 100 * S, keepAliveMs: 20 * S, why: 'histogram' as const };
    assert.equal(warmAt(k, 96 * S, 5 * S), true);
    assert.equal(warmAt(k, 94 * S, 5 * S), false);
    assert.equal(warmAt(k, 120 * S, 5 * S), false);
    assert.equal(warmAt({ ...k, prewarmMs: 0 }, 0), true);
  });
});

describe('learned keep-alive against fixed windows', () => {
  it('periodic (every 120 s): pre-warmed before each arrival, warm a fraction of fixed 600 s', () => {
    const { auto: a, f60, f600 } = all(every(120 * S, 200));
    assert.equal(f60.cold, 200, 'fixed 60 s misses every arrival');
    assert.ok(a.cold <= MIN_IDLE_TIMES + 1, `auto: ${a.cold} cold`);
    assert.ok(a.idleMs < f600.idleMs / 3, `auto idle ${a.idleMs} vs fixed 600 s ${f600.idleMs}`);
  });

  it('bursty (10 requests a second apart, bursts 20 min apart): as few cold starts as fixed 600 s, far less idle', () => {
    const arrivals = Array.from({ length: 30 }, (_, b) => every(S, 10, b * 1200 * S)).flat();
    const { auto: a, f600 } = all(arrivals);
    assert.ok(a.cold <= f600.cold * 1.2, `auto ${a.cold} vs fixed 600 s ${f600.cold}`);
    assert.ok(a.idleMs < f600.idleMs / 10, `auto idle ${a.idleMs} vs ${f600.idleMs}`);
  });

  it('rare (hourly, past the bound): pre-warmed before the next arrival, which fixed windows always miss', () => {
    const { auto: a, f60, f600 } = all(every(3600 * S, 48));
    assert.equal(f600.cold, 48);
    assert.equal(f60.cold, 48);
    assert.ok(a.cold <= MIN_IDLE_TIMES + 1, `auto: ${a.cold} cold`);
  });

  it('Poisson (mean 30 s): fewer cold starts than fixed 60 s, less idle than fixed 600 s', () => {
    const { auto: a, f60, f600 } = all(poisson(30 * S, 500));
    assert.ok(a.cold < f60.cold, `auto ${a.cold} vs fixed 60 s ${f60.cold}`);
    assert.ok(a.idleMs < f600.idleMs, `auto idle ${a.idleMs} vs fixed 600 s ${f600.idleMs}`);
  });

  it('drifting (period 60 s, then 200 s): follows the new period within a ring of idle times', () => {
    const first = every(60 * S, 100);
    const arrivals = [...first, ...every(200 * S, 120, first.at(-1)! + 200 * S)];
    const late = replayKeepAlive(arrivals, auto, LEAD);
    const early = replayKeepAlive(arrivals.slice(0, 100 + IDLE_TIMES_KEPT), auto, LEAD);
    // After the ring has turned over, the new period is all it holds: arrivals are warm again.
    assert.ok(late.cold - early.cold <= 2, `cold after settling: ${late.cold - early.cold}`);
    assert.ok(late.cold < replayKeepAlive(arrivals, fixed(60 * S), LEAD).cold / 4);
  });
});
