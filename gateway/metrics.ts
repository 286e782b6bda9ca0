import { Counter, Gauge, Histogram, Registry as PromRegistry } from 'prom-client';

/** Gateway metrics, named in Triton's vocabulary where one applies. */
export function createMetrics() {
  const registry = new PromRegistry();
  return {
    registry,
    requests: new Counter({ name: 'embers_requests_total', help: 'Run requests by function and HTTP status', labelNames: ['function', 'status'], registers: [registry] }),
    duration: new Histogram({
      name: 'embers_request_duration_seconds',
      help: 'Run request time at the gateway, by function',
      labelNames: ['function'],
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
      registers: [registry],
    }),
    queue: new Histogram({ name: 'embers_queue_duration_seconds', help: 'Time a request waited in its queue', labelNames: ['function'], buckets: [0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30], registers: [registry] }),
    inflight: new Gauge({ name: 'embers_gateway_inflight_requests', help: 'Requests this gateway is waiting on', registers: [registry] }),
  };
}

export type Metrics = ReturnType<typeof createMetrics>;
