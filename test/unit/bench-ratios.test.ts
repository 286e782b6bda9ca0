import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { PairedC1 } from '../../bench/paired.ts';
import { computeRatios, cpuPerRequestByRole, cpuPerRequestUs, echoVsPingByCpu, type Measured, type OcrPoint } from '../../bench/result.ts';
import { latency, type Window } from '../../bench/stats.ts';
import { takeTurns, takeTurnsOf } from '../../bench/turns.ts';

describe('bench: CPU per request', () => {
  it('divides each role’s busy cores by the answered rate, leaving out roles under 0.01 cores', () => {
    const echo = { reqPerSec: 4000, cores: { gateway: 0.8, redis: 0.2, replicas: 0.4, loadgen: 0.36, other: 0.004 } };
    const by = cpuPerRequestByRole(echo);
    assert.deepEqual(Object.keys(by).sort(), ['gateway', 'loadgen', 'redis', 'replicas']);
    assert.equal(Math.round(by.gateway), 200);
    assert.equal(Math.round(cpuPerRequestUs(echo)), 440);
  });

  it('gives ping ÷ echo by CPU only when both sides were measured', () => {
    const echo = { reqPerSec: 4000, cores: { gateway: 0.8, redis: 0.2, replicas: 0.4, loadgen: 0.36 } };
    const ping = { reqPerSec: 16000, cores: { naive: 0.64, loadgen: 0.96 } };
    assert.equal(echoVsPingByCpu(echo, ping).echo_vs_ping_by_cpu?.toFixed(3), (100 / 440).toFixed(3));
    // No /proc (not Linux), or nothing answered: no figure rather than 0 or Infinity.
    assert.deepEqual(echoVsPingByCpu({ reqPerSec: 4000, cores: {} }, ping), {});
    assert.deepEqual(echoVsPingByCpu(echo, { reqPerSec: 0, cores: { naive: 1 } }), {});
  });
});

describe('bench: saturation against raw, taking turns', () => {
  it('runs function sides in the order a, b, b, a and pools each side’s runs', async () => {
    const order: string[] = [];
    const side = (name: string, perSec: number) => async (w: Window) => {
      order.push(name);
      assert.equal(w.measureMs, 500, 'each turn gets half the window');
      const n = Math.round((perSec * w.measureMs) / 1000);
      const samples = Array.from({ length: n }, () => 1000 / perSec);
      const result = { concurrency: 1, requests: n, errors: 0, seconds: w.measureMs / 1000, reqPerSec: perSec, latencyMs: latency(samples), statuses: {}, warmupSeconds: 0, abandoned: 0 };
      return { result, samples, timings: new Map() };
    };
    const [raw, embers] = await takeTurns([], { warmupMs: 0, measureMs: 1000 }, side('raw', 20), side('embers', 30), 8);
    assert.deepEqual(order, ['raw', 'embers', 'embers', 'raw']);
    assert.deepEqual(raw.runsReqPerSec, [20, 20]);
    assert.equal(raw.requests, 20);
    assert.equal(Math.round(embers.reqPerSec), 30);
  });

  it('runs three sides in order and back (a, b, c, c, b, a), as the light-model section takes them', async () => {
    const order: string[] = [];
    const side = (name: string) => async (w: Window) => {
      order.push(name);
      const result = { concurrency: 1, requests: 10, errors: 0, seconds: w.measureMs / 1000, reqPerSec: 20, latencyMs: latency([1]), statuses: {}, warmupSeconds: 0, abandoned: 0 };
      return { result, samples: [1], timings: new Map() };
    };
    const measured = await takeTurnsOf([], { warmupMs: 0, measureMs: 1000 }, [side('raw'), side('embers'), side('plain')], 32);
    assert.deepEqual(order, ['raw', 'embers', 'plain', 'plain', 'embers', 'raw']);
    assert.equal(measured.length, 3);
    assert.deepEqual(measured[2].runsReqPerSec, [20, 20]);
  });

  it('judges the light model at c = 32 and at its lowest point, and CPU per echo, when given', () => {
    const paired = { addedP50Ms: 5, blockDiffQuartilesMs: [0, 1] } as unknown as PairedC1;
    const echo = { reqPerSec: 4000, cores: { gateway: 0.4, redis: 0.2 } } as unknown as Measured;
    const { ratios, pass } = computeRatios([], { reqPerSec: 1 }, { ratio: 1 }, paired, echo, echo, undefined, { embersVsRaw: 0.82, lowestEmbersVsRaw: 0.31 });
    assert.equal(ratios.light_vs_raw, 0.82);
    assert.equal(pass.light_vs_raw, true);
    assert.equal(pass.light_vs_raw_lowest, false);
    assert.equal(Math.round(ratios.cpu_us_per_echo!), 150);
    assert.equal(pass.cpu_us_per_echo, true);
  });

  it('judges embers_vs_raw on the turns and keeps the sweep’s best against the first raw run beside it', () => {
    const point = (c: number, embers: number) => ({ concurrency: c, embers: { reqPerSec: embers }, ratio: 1 }) as unknown as OcrPoint;
    const paired = { addedP50Ms: 5, blockDiffQuartilesMs: [0, 1] } as unknown as PairedC1;
    const m = { reqPerSec: 1000, cores: {} } as unknown as Measured;
    const { ratios, pass } = computeRatios([point(8, 29), point(32, 27)], { reqPerSec: 32.7 }, { ratio: 0.95 }, paired, m, m);
    assert.equal(ratios.embers_vs_raw, 0.95);
    assert.equal(pass.embers_vs_raw, true);
    assert.equal(ratios.embers_vs_raw_sweep?.toFixed(3), (29 / 32.7).toFixed(3));
  });
});
