import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { decide, initialScalerState, type ScalerSettings, type ScalingPolicy } from '../../scheduler/scaler.ts';

const policy: ScalingPolicy = { minReplicas: 0, maxReplicas: 8, targetConcurrency: 10, idleTimeoutS: 300 };
const settings: ScalerSettings = { stableWindowMs: 60_000, panicWindowMs: 6_000, panicThreshold: 2 };

/** Replays a load trace (in-flight per second) and returns desired replicas per second. */
function replay(trace: number[], p: ScalingPolicy = policy, capacity = 100, s: ScalerSettings = settings): number[] {
  let state = initialScalerState();
  const out: number[] = [];
  trace.forEach((inFlight, i) => {
    const d = decide(state, { now: i * 1000, inFlight, ready: state.desired, capacity }, p, s);
    state = d.state;
    out.push(d.desired);
  });
  return out;
}

const repeat = (v: number, n: number) => Array<number>(n).fill(v);

describe('scaler', () => {
  it('burst from zero: a replica at once, then panic follows the burst up within seconds', () => {
    const out = replay([...repeat(0, 5), ...repeat(60, 10)]);
    assert.equal(out[4], 0, 'idle and never used: zero');
    assert.equal(out[5], 1, 'first waiting request: one replica immediately');
    assert.ok(out[5 + 5] >= 5, `panic window reaches ~6 replicas within 5 s: ${out}`);
    assert.equal(Math.max(...out), 6, 'never past ceil(60 / 10)');
  });

  it('panic starts at twice the target per ready replica, not at just over it', () => {
    // One ready replica, target 10, a minute settled at 10 in flight: 11 is a little over (the
    // stable window scales for it), 100 brings the 6 s panic window's mean to 25 (panic).
    const settle = (inFlight: number) => {
      let state = { ...initialScalerState(), desired: 1 };
      for (let t = 0; t < 70; t++) state = decide(state, { now: t * 1000, inFlight: 10, ready: 1, capacity: 100 }, policy, settings).state;
      return decide(state, { now: 70_000, inFlight, ready: 1, capacity: 100 }, policy, settings);
    };
    assert.ok(!settle(11).state.panicUntil || settle(11).state.panicUntil <= 70_000, 'just over the target: no panic');
    assert.ok(settle(100).state.panicUntil > 70_000, 'the panic window averaging 2.5 times the target: panic');
  });

  it('steady load settles at ceil(in-flight / target) and stays there', () => {
    const out = replay(repeat(35, 180));
    assert.deepEqual(out.slice(-60), repeat(4, 60));
  });

  it('slow decay: the new lower level is reached only after a stable window', () => {
    const trace = [...repeat(40, 60), ...repeat(10, 120)];
    const out = replay(trace);
    assert.equal(out[59], 4);
    assert.ok(out[60 + 30] > 1 && out[60 + 58] > 1, `still above 1 within the window after load dropped: ${out.slice(60, 120)}`);
    assert.equal(out.at(-1), 1, 'down to ceil(10/10) once the window has passed');
    for (let i = 1; i < out.length; i++) if (i >= 60) assert.ok(out[i] <= out[i - 1], 'monotone down while load falls');
  });

  it('flapping load does not thrash', () => {
    const trace = Array.from({ length: 240 }, (_, i) => (Math.floor(i / 5) % 2 === 0 ? 30 : 0));
    const out = replay(trace).slice(60);
    let changes = 0;
    for (let i = 1; i < out.length; i++) if (out[i] !== out[i - 1]) changes++;
    assert.ok(changes <= 2, `desired changed ${changes} times: ${out.join(',')}`);
  });

  it('respects maxReplicas, minReplicas and node capacity', () => {
    assert.equal(Math.max(...replay(repeat(500, 30), { ...policy, maxReplicas: 3 })), 3);
    assert.equal(Math.min(...replay(repeat(0, 30), { ...policy, minReplicas: 2 })), 2);
    assert.equal(Math.max(...replay(repeat(500, 30), policy, 2)), 2);
  });

  it('goes to zero only after idleTimeoutS without work, and wakes on the next request', () => {
    const p = { ...policy, idleTimeoutS: 90 };
    const trace = [...repeat(5, 10), ...repeat(0, 150), 3];
    const out = replay(trace, p);
    assert.equal(out[10 + 60], 1, 'average is zero but the function was busy 60 s ago: keep one');
    assert.equal(out[9 + 89], 1, 'last work at t=9 s: still one at t=98 s');
    assert.equal(out[10 + 95], 0, 'idle past 90 s: zero');
    assert.equal(out.at(-1), 1, 'a new request brings one back at once');
  });

  it('goes to zero idleTimeoutS after the last request, whatever the stable window', () => {
    const one = replay([1, ...repeat(0, 10)], { ...policy, idleTimeoutS: 3 });
    assert.deepEqual(one.slice(0, 5), [1, 1, 1, 0, 0], `one request at t=0, idleTimeoutS 3: ${one}`);
    const many = replay([...repeat(35, 10), ...repeat(0, 10)], { ...policy, idleTimeoutS: 2 });
    assert.equal(many[9], 4);
    assert.equal(many[11], 0, `four replicas, then idle for 2 s: zero, though a scale-up was seconds ago: ${many}`);
  });

  it("'auto' learns a periodic function's gap: to zero between arrivals, pre-warmed before the next", () => {
    const period = 90;
    const trace = Array.from({ length: period * 12 }, (_, t) => (t % period === 0 ? 1 : 0));
    const out = replay(trace, { ...policy, idleTimeoutS: 'auto' }, 100, { ...settings, prewarmLeadMs: 3_000 });
    assert.equal(out[period + 40], 1, 'before it has learned: the fixed window keeps the replica');
    const last = period * 11;
    assert.equal(out[last + 40], 0, 'learned: zero in the middle of the gap');
    assert.equal(out[last + period - 2], 1, 'pre-warmed a few seconds before the next arrival');
    assert.equal(out[last + 1], 0, 'no keep-alive right after a request: the next is 90 s away');
  });

  it('learns from requests that came and went between two observations (lastTakenAt)', () => {
    // A request every 2 s that lasts a few ms: never in flight when observed, once a second.
    let state = initialScalerState();
    const p: ScalingPolicy = { ...policy, idleTimeoutS: 'auto' };
    const desired: number[] = [];
    for (let t = 0; t < 200; t++) {
      const lastTakenAt = t >= 1 ? Math.floor((t - 1) / 2) * 2_000 + 300 : null;
      const d = decide(state, { now: t * 1000, inFlight: t === 0 ? 1 : 0, lastTakenAt, ready: state.desired, capacity: 100 }, p, settings);
      state = d.state;
      desired.push(d.desired);
    }
    assert.ok(desired.every((n) => n === 1), `warm throughout, never drained between requests: ${desired.join('')}`);
    assert.equal(state.lastActiveAt, 198_300, 'the last request taken');
    assert.ok(state.idleMs.length >= 60 && state.idleMs.every((ms) => ms === 2_000 || ms === 2_300), `one idle time per request, about 2 s: ${state.idleMs.slice(-5)}`);
  });

  it('a request taken before the scheduler first looked (a restart) is not activity', () => {
    const p: ScalingPolicy = { ...policy, idleTimeoutS: 'auto' };
    const first = decide(initialScalerState(), { now: 10_000, inFlight: 0, lastTakenAt: 9_000, ready: 0, capacity: 100 }, p, settings);
    assert.equal(first.desired, 0, 'starts from zero');
    assert.equal(first.state.lastActiveAt, null);
    const next = decide(first.state, { now: 11_000, inFlight: 0, lastTakenAt: 10_500, ready: 0, capacity: 100 }, p, settings);
    assert.equal(next.state.lastActiveAt, 10_500, 'a request taken since it looked is');
    assert.equal(next.desired, 1);
  });

  it('EMBERS_KEEP_ALIVE=fixed keeps the bound whatever the pattern', () => {
    const period = 90;
    const trace = Array.from({ length: period * 12 }, (_, t) => (t % period === 0 ? 1 : 0));
    const out = replay(trace, { ...policy, idleTimeoutS: 'auto' }, 100, { ...settings, keepAlive: 'fixed' });
    assert.ok(out.slice(1).every((n) => n === 1), 'warm throughout: every gap is inside 300 s');
  });
});

import { place } from '../../scheduler/placement.ts';
import { parseNvidiaSmi } from '../../native/gpu.ts';

describe('placement', () => {
  const nodes = [
    { id: 'a', slots: 2 },
    { id: 'b', slots: 2 },
  ];
  it('spreads one function over nodes', () => {
    assert.deepEqual(place({ ocr: 2 }, nodes, {}), { ocr: { a: 1, b: 1 } });
  });
  it('keeps what is placed and trims from the busiest node', () => {
    assert.deepEqual(place({ ocr: 1 }, nodes, { ocr: { a: 1, b: 1 } }), { ocr: { b: 1 } });
    assert.deepEqual(place({ ocr: 1 }, nodes, { ocr: { a: 2 } }), { ocr: { a: 1 } });
  });
  it('adds model replicas only where cores are free; every function still gets its first', () => {
    const cpu = [
      { id: 'a', slots: 8, cores: 4, modelReplicaCores: 2 },
      { id: 'b', slots: 8, cores: 2, modelReplicaCores: 2 },
    ];
    const models = new Set(['ocr', 'vad']);
    // Two ocr replicas fill a's 4 cores and b's 2: the third and fourth would only contend.
    assert.deepEqual(place({ ocr: 4 }, cpu, {}, { runsModels: models }), { ocr: { a: 2, b: 1 } });
    // vad's first replica is placed although every core is spoken for; its second is not.
    assert.deepEqual(place({ ocr: 4, vad: 2 }, cpu, { ocr: { a: 2, b: 1 } }, { runsModels: models }), { ocr: { a: 2, b: 1 }, vad: { b: 1 } });
    // Functions without models (I/O-bound handlers) are limited by slots only.
    assert.deepEqual(place({ ocr: 3, echo: 4 }, cpu, { ocr: { a: 2, b: 1 } }, { runsModels: models }), { ocr: { a: 2, b: 1 }, echo: { a: 2, b: 2 } });
    // A GPU node's model replicas cost no cores.
    assert.deepEqual(place({ ocr: 3 }, [{ id: 'g', slots: 8, cores: 2, modelReplicaCores: 0 }], {}, { runsModels: models }), { ocr: { g: 3 } });
  });
  it('packs replicas by footprint within each node\'s memory; a function with work gets its first regardless', () => {
    const node = [{ id: 'a', slots: 16, memoryBytes: 1000 }];
    const fp = (fn: string) => (fn.startsWith('big') ? 400 : fn === 'huge' ? 5000 : 50);
    const p = place({ big: 3, tiny: 3 }, node, {}, { footprint: fp });
    assert.deepEqual(p, { big: { a: 2 }, tiny: { a: 3 } }, 'two of 400 and three of 50 fit 1000; a third big does not');
    assert.deepEqual(place({ huge: 2 }, node, {}, { footprint: fp }), { huge: { a: 1 } }, 'over the budget with work: its first replica only');
    assert.deepEqual(place({ huge: 1 }, node, {}, { footprint: fp, working: new Set() }), {}, 'over the budget and idle (a keep-alive): none');
  });
  it('counts slots for replicas with work only: many idle functions stay warm on few slots', () => {
    const node = [{ id: 'a', slots: 2, memoryBytes: 1000 }];
    const fp = () => 50;
    const many = Object.fromEntries(Array.from({ length: 12 }, (_, i) => [`small-${i}`, 1]));
    const idle = place(many, node, {}, { footprint: fp, working: new Set() });
    assert.equal(Object.keys(idle).length, 12, 'twelve idle replicas on two slots');
    const busy = place({ ...many, hot: 4 }, node, idle, { footprint: fp, working: new Set(['hot']) });
    assert.deepEqual(busy.hot, { a: 2 }, 'the one with work takes the two slots');
    assert.equal(Object.keys(busy).length, 13, 'and the idle ones stay');
    const tight = place({ ...many, hot: 1 }, [{ id: 'a', slots: 2, memoryBytes: 500 }], idle, { footprint: fp, working: new Set(['hot']) });
    assert.equal(Object.values(tight).reduce((a, m) => a + (m.a ?? 0), 0), 11, 'a smaller budget takes idle replicas back: ten of 50 fit 500, plus the first replica of the one with work');
  });

  it('never exceeds node slots', () => {
    const p = place({ ocr: 3, echo: 3 }, nodes, {});
    const perNode = (id: string) => Object.values(p).reduce((n, m) => n + (m[id] ?? 0), 0);
    assert.ok(perNode('a') <= 2 && perNode('b') <= 2);
  });
  it('moves replicas off a node that is gone', () => {
    assert.deepEqual(place({ ocr: 2 }, [{ id: 'b', slots: 4 }], { ocr: { a: 1, b: 1 } }), { ocr: { b: 2 } });
  });
  it('drops functions at zero', () => {
    assert.deepEqual(place({ ocr: 0 }, nodes, { ocr: { a: 1 } }), {});
  });
});

describe('gpu discovery', () => {
  it('parses nvidia-smi csv', () => {
    assert.deepEqual(parseNvidiaSmi('0, NVIDIA H100 80GB HBM3, 81559\n1, NVIDIA H100 80GB HBM3, 81559\n'), [
      { index: 0, name: 'NVIDIA H100 80GB HBM3', memoryMiB: 81559 },
      { index: 1, name: 'NVIDIA H100 80GB HBM3', memoryMiB: 81559 },
    ]);
    assert.deepEqual(parseNvidiaSmi(''), []);
  });
});

import { lastTakenAt } from '../../core/live-queue.ts';

describe('lastTakenAt', () => {
  it("reads the replicas group's last-delivered-id as XINFO GROUPS gives it", () => {
    assert.equal(lastTakenAt([['name', 'replicas', 'consumers', 1, 'pending', 1, 'last-delivered-id', '1795811333503-0', 'entries-read', 1, 'lag', 0]]), 1795811333503);
    assert.equal(lastTakenAt([{ name: 'replicas', 'last-delivered-id': '1795811333503-2' }]), 1795811333503);
    assert.equal(lastTakenAt([['name', 'replicas', 'last-delivered-id', '0-0']]), null, 'nothing taken yet');
    assert.equal(lastTakenAt([['name', 'other', 'last-delivered-id', '5-0']]), null);
    assert.equal(lastTakenAt(null), null);
  });
});
