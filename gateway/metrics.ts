import { Counter, Gauge, Histogram, Registry as PromRegistry } from 'prom-client';
import type { ColdStartPhases } from '../core/contracts.ts';

const PHASES: [keyof ColdStartPhases, string][] = [
  ['spawnMs', 'spawn'],
  ['bundleMs', 'bundle'],
  ['modelFetchMs', 'model_fetch'],
  ['modelLoadMs', 'model_load'],
  ['setupMs', 'setup'],
  ['warmupMs', 'warmup'],
  ['totalMs', 'total'],
];

/** Gateway metrics, named in Triton's vocabulary where one applies. */
export function createMetrics() {
  const registry = new PromRegistry();
  const coldStart = new Histogram({
    name: 'embers_cold_start_seconds',
    help: 'Replica cold starts by function and phase (spawn, bundle, model_fetch, model_load, setup, warmup, total)',
    labelNames: ['function', 'phase'],
    buckets: [0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
    registers: [registry],
  });
  return {
    observeColdStart(fn: string, phases: ColdStartPhases) {
      for (const [key, phase] of PHASES) coldStart.observe({ function: fn, phase }, phases[key] / 1000);
    },
    replicas: new Gauge({ name: 'embers_replicas', help: 'Replicas by function and state (starting, ready, draining, failed)', labelNames: ['function', 'state'], registers: [registry] }),
    registry,
    requests: new Counter({ name: 'embers_requests_total', help: 'Run requests by function and HTTP status', labelNames: ['function', 'status'], registers: [registry] }),
    refused: new Counter({
      name: 'embers_requests_refused_total',
      help: 'Runs refused before they were queued, by function and error code (rate_limited, too_many_in_flight, queue_full: 429; redis_full: 503)',
      labelNames: ['function', 'code'],
      registers: [registry],
    }),
    duration: new Histogram({
      name: 'embers_request_duration_seconds',
      help: 'Run request time at the gateway, by function',
      labelNames: ['function'],
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
      registers: [registry],
    }),
    queue: new Histogram({ name: 'embers_queue_duration_seconds', help: 'Time a request waited in its queue', labelNames: ['function'], buckets: [0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30], registers: [registry] }),
    inflight: new Gauge({ name: 'embers_gateway_inflight_requests', help: 'Requests this gateway is waiting on', registers: [registry] }),
    // Read from Redis at scrape time (scrape.ts): the platform's state, the same from every gateway.
    redisReplicas: new Gauge({ name: 'embers_redis_replicas', help: 'Replicas connected to the Redis primary in use (only under Sentinel)', registers: [registry] }),
    redisUp: new Gauge({ name: 'embers_redis_up', help: 'Whether Redis answered this scrape (1) or not (0)', registers: [registry] }),
    waiting: new Gauge({ name: 'embers_queue_waiting_requests', help: 'Live requests queued that no replica has taken yet, by function', labelNames: ['function'], registers: [registry] }),
    oldestWaiting: new Gauge({ name: 'embers_queue_oldest_waiting_seconds', help: 'How long the oldest live request no replica has taken yet has waited, by function (0: none waits)', labelNames: ['function'], registers: [registry] }),
    batchOutstanding: new Gauge({ name: 'embers_batch_lines_outstanding', help: 'Lines of the batches in progress not yet done, by function', labelNames: ['function'], registers: [registry] }),
    usageBuffer: new Gauge({ name: 'embers_usage_buffer_records', help: 'Usage records in Redis not yet exported to S3 by the leading scheduler', registers: [registry] }),
    usageExportLag: new Gauge({ name: 'embers_usage_export_lag_seconds', help: 'How long the oldest usage record not yet exported to S3 has waited (0: none waits)', registers: [registry] }),
    batchSinceProgress: new Gauge({
      name: 'embers_batch_seconds_since_progress',
      help: 'Longest time any batch in progress with lines outstanding has gone without a line finishing, by function (0: none outstanding)',
      labelNames: ['function'],
      registers: [registry],
    }),
  };
}

export type Metrics = ReturnType<typeof createMetrics>;
