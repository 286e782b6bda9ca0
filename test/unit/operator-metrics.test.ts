// The pure parts of the metrics operators read: what a node agent adds from its replicas' reports
// and why it says a replica ended, and the gauges a gateway sets from what it read in Redis.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { EXIT_REPLACE_ME } from '../../core/contracts.ts';
import { clusterGauges } from '../../gateway/cluster-gauges.ts';
import type { ReplicaCounters } from '../../runtime/replica/agent-messages.ts';
import { counterIncrements, createAgentMetrics, exitReason } from '../../scheduler/agent-metrics.ts';
import { MetricsServerError, serveMetrics } from '../../scheduler/metrics-server.ts';
import { createLogger } from '../../core/log.ts';

const counters = (requests: number, computeMs: number, calls: number, executions: number): ReplicaCounters => ({
  usage: { requests, computeMs, bytesIn: requests * 10, bytesOut: requests * 100 },
  models: { det: { calls, inferences: calls * 2, executions, inferMs: executions * 5, failures: 0 } },
});

describe('node agent metrics', () => {
  it('adds what grew since a replica\'s last report, all of a count that started again from zero', () => {
    assert.deepEqual(counterIncrements(undefined, counters(3, 30, 6, 2)), counters(3, 30, 6, 2));
    assert.deepEqual(counterIncrements(counters(3, 30, 6, 2), counters(5, 50, 10, 3)), {
      usage: { requests: 2, computeMs: 20, bytesIn: 20, bytesOut: 200 },
      models: { det: { calls: 4, inferences: 8, executions: 1, inferMs: 5, failures: 0 } },
    });
    // The user-code process restarted: its batcher counts are new, the replica's metering is not.
    const restarted = counterIncrements(counters(5, 50, 10, 3), { usage: counters(6, 60, 0, 0).usage, models: { det: { calls: 1, inferences: 2, executions: 1, inferMs: 5, failures: 0 } } });
    assert.deepEqual(restarted.models.det, { calls: 1, inferences: 2, executions: 1, inferMs: 5, failures: 0 });
    assert.equal(restarted.usage.requests, 1);
  });

  it('names why a replica ended: stopped, replaced, crashed, or failed before it was ever ready', () => {
    assert.equal(exitReason({ stopping: true, code: 1, everReady: true }), 'stopped');
    assert.equal(exitReason({ stopping: false, code: EXIT_REPLACE_ME, everReady: true }), 'replaced');
    assert.equal(exitReason({ stopping: false, code: 1, everReady: true }), 'crashed');
    assert.equal(exitReason({ stopping: false, code: null, everReady: false }), 'start_failed');
  });

  it('keeps an exited replica\'s work counted, and a started function\'s series at zero until something happens', async () => {
    const m = createAgentMetrics();
    m.started('ocr');
    m.reported('r1', 'ocr', counters(3, 1500, 6, 2));
    m.reported('r1', 'ocr', counters(4, 2000, 8, 3));
    m.exited('r1', 'ocr', 'crashed');
    m.started('ocr');
    m.reported('r2', 'ocr', counters(1, 500, 2, 1));
    const { body } = await m.render(async () => 'PONG');
    for (const line of [
      'embers_replica_starts_total{function="ocr"} 2',
      'embers_replica_exits_total{function="ocr",reason="crashed"} 1',
      'embers_replica_exits_total{function="ocr",reason="start_failed"} 0',
      'embers_usage_requests_total{function="ocr"} 5',
      'embers_usage_compute_seconds_total{function="ocr"} 2.5',
      'embers_usage_bytes_total{function="ocr",direction="out"} 500',
      'embers_inference_calls_total{function="ocr",model="det"} 10',
      'embers_inference_count_total{function="ocr",model="det"} 20',
      'embers_inference_exec_count_total{function="ocr",model="det"} 4',
      'embers_redis_up 1',
    ])
      assert.ok(body.split('\n').includes(line), `${line} in:\n${body}`);
    const down = await m.render(() => Promise.reject(new Error('ECONNREFUSED')));
    assert.match(down.body, /^embers_redis_up 0$/m);
  });
});

describe('a node agent\'s /metrics listener', () => {
  it('serves /metrics alone, and a port already taken stops it naming the setting', async () => {
    const log = createLogger('test', 'silent');
    const server = await serveMetrics({ host: '127.0.0.1', port: 0, log, render: async () => ({ contentType: 'text/plain; version=0.0.4', body: 'embers_redis_up 1\n' }) });
    try {
      const res = await fetch(server.url);
      assert.equal(res.status, 200);
      assert.equal(await res.text(), 'embers_redis_up 1\n');
      assert.equal((await fetch(server.url.replace('/metrics', '/other'))).status, 404);
      assert.equal((await fetch(server.url, { method: 'POST' })).status, 405);
      const port = Number(new URL(server.url).port);
      await assert.rejects(serveMetrics({ host: '127.0.0.1', port, log, render: async () => ({ contentType: '', body: '' }) }), (err: Error) => err instanceof MetricsServerError && /port \d+ on 127\.0\.0\.1 is already in use.*EMBERS_METRICS_PORT/.test(err.message));
    } finally {
      await server.close();
    }
  });
});

describe('gateway gauges read from Redis', () => {
  const now = Date.parse('2026-03-01T12:00:00Z');
  const base = { functions: ['a', 'b'], nowMs: now, waiting: [2, `${now - 45_000}-0`, 0, '0'], replicas: [[{ state: 'ready' }, { state: 'starting' }, { state: 'ready' }], []], batches: [], usage: { records: 0, oldestId: null } };

  it('gives every deployed function each gauge, zero when idle', () => {
    const g = clusterGauges(base);
    assert.deepEqual(g.replicas.get('a'), { starting: 1, ready: 2, draining: 0, failed: 0 });
    assert.deepEqual(g.replicas.get('b'), { starting: 0, ready: 0, draining: 0, failed: 0 });
    assert.deepEqual(g.waiting.get('a'), { requests: 2, oldestSeconds: 45 });
    assert.deepEqual(g.waiting.get('b'), { requests: 0, oldestSeconds: 0 });
    assert.deepEqual(g.batches.get('b'), { outstanding: 0, secondsSinceProgress: 0 });
    assert.deepEqual(g.usage, { bufferRecords: 0, lagSeconds: 0 });
  });

  it('reports the usage records not exported yet and how long the oldest has waited', () => {
    assert.deepEqual(clusterGauges({ ...base, usage: { records: 1200, oldestId: `${now - 7_500}-3` } }).usage, { bufferRecords: 1200, lagSeconds: 7.5 });
  });

  it('sums the lines batches in progress have left, and takes the longest any has gone without finishing one (not paused for a budget)', () => {
    const row = (fn: string, status: string, total: number, done: number, failed: number, progressAt: number | null, inProgressAt: string, paused: string | null = null) => [fn, status, String(total), String(done), String(failed), progressAt === null ? null : String(progressAt), inProgressAt, paused];
    const g = clusterGauges({
      ...base,
      batches: [
        row('a', 'in_progress', 10, 4, 1, now - 20_000, '2026-03-01T11:00:00Z'),
        // Nothing finished yet: waiting for progress since it started.
        row('a', 'in_progress', 3, 0, 0, null, '2026-03-01T11:58:00Z'),
        // Paused for its tenant's budget: its lines count, its wait does not.
        row('a', 'in_progress', 7, 2, 0, now - 3_600_000, '2026-03-01T10:00:00Z', '{"code":"budget_exhausted"}'),
        // All lines done (finalizing soon), another status, or no lines left: nothing outstanding.
        row('a', 'in_progress', 2, 1, 1, now - 900_000, '2026-03-01T11:00:00Z'),
        row('b', 'validating', 0, 0, 0, null, ''),
        row('b', 'finalizing', 5, 5, 0, now - 900_000, '2026-03-01T11:00:00Z'),
      ],
    });
    assert.deepEqual(g.batches.get('a'), { outstanding: 13, secondsSinceProgress: 120 });
    assert.deepEqual(g.batches.get('b'), { outstanding: 0, secondsSinceProgress: 0 });
  });
});
