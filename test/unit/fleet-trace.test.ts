// The fleet benchmark's synthetic trace: seeded, Zipf-skewed, most functions rare.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { DEFAULT_TRACE, makeTrace } from '../../bench/fleet-trace.ts';
import { fleetVerdicts } from '../../bench/fleet-report.ts';
import type { PolicyResult } from '../../bench/fleet.ts';

describe('fleet trace', () => {
  const trace = makeTrace();

  it('is the same for the same seed, and another for another', () => {
    assert.deepEqual(makeTrace().requests.slice(0, 50), trace.requests.slice(0, 50));
    assert.notDeepEqual(makeTrace({ ...DEFAULT_TRACE, seed: 7 }).requests.slice(0, 50), trace.requests.slice(0, 50));
  });

  it('is skewed: the most popular function takes a large share, most functions are called rarely or never', () => {
    const per = new Map<string, number>();
    for (const r of trace.requests) per.set(r.fn, (per.get(r.fn) ?? 0) + 1);
    const top = Math.max(...per.values());
    assert.ok(top / trace.requests.length > 0.25, `top share ${top / trace.requests.length}`);
    const rare = trace.functions.filter((f) => (per.get(f.name) ?? 0) <= 2).length;
    assert.ok(rare > trace.functions.length / 2, `${rare} of ${trace.functions.length} called at most twice`);
  });

  it('mixes arrival patterns and kinds, within the window, in time order', () => {
    assert.deepEqual(new Set(trace.functions.map((f) => f.arrivals)), new Set(['periodic', 'poisson', 'bursty']));
    assert.equal(trace.functions.filter((f) => f.kind === 'cls').length, DEFAULT_TRACE.cls);
    assert.equal(trace.functions.filter((f) => f.kind === 'ocr').length, DEFAULT_TRACE.ocr);
    assert.ok(trace.requests.every((r, i) => r.at >= 0 && r.at < DEFAULT_TRACE.seconds * 1000 && (i === 0 || r.at >= trace.requests[i - 1].at)));
  });

  it('gives a periodic function a history of gaps near its period', () => {
    const f = trace.functions.find((x) => x.arrivals === 'periodic' && x.rate > 1 / 60)!;
    const gaps = trace.history[f.name];
    assert.ok(gaps.length >= 5 && gaps.length <= 64);
    for (const g of gaps) assert.ok(Math.abs(g - 1000 / f.rate) < 0.1 * (1000 / f.rate), `${g} ms against a period of ${1000 / f.rate}`);
  });
});

describe('fleet verdicts', () => {
  const policy = (name: string, cold: number, idle: number, o: Partial<PolicyResult> = {}): PolicyResult =>
    ({ policy: name, requests: 100, ok: 100, status5xx: 0, otherStatus: 0, lost: 0, errors: {}, cold, coldFraction: cold / 100, idleReplicaSeconds: idle, replicaSeconds: idle, peakReplicas: 1, seconds: 1, ...o }) as PolicyResult;
  const trace = { functions: 1, byKind: { tiny: 1, cls: 0, ocr: 0 }, requests: 100, warmupRequests: 0, functionsCalled: 1, calledAtMostTwice: 0, seconds: 1, seed: 1 };

  it('judges auto against both fixed windows', () => {
    const v = fleetVerdicts({ trace, policies: [policy('fixed 60 s', 30, 500), policy('fixed 600 s', 10, 3000), policy('auto', 11, 450)] });
    assert.deepEqual(v, { noErrors: true, beatsFixed60: true, nearFixed600: true });
    const worse = fleetVerdicts({ trace, policies: [policy('fixed 60 s', 30, 500), policy('fixed 600 s', 10, 3000), policy('auto', 13, 600, { status5xx: 1 })] });
    assert.deepEqual(worse, { noErrors: false, beatsFixed60: false, nearFixed600: false });
  });
});
