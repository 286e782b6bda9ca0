import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { cpuPerRequestByRole, cpuPerRequestUs, echoVsPingByCpu } from '../../bench/result.ts';

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
