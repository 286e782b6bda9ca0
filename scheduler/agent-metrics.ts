// A node agent's Prometheus metrics: its replicas' starts and exits, and what they report with
// their heartbeats (runtime/replica/agent-messages.ts: usage as metered, and per model its batcher's
// counts), summed per function on this node. A replica's counts start from zero and end with it;
// each report adds only what grew since that replica's last, so an exited replica's work stays
// counted and the node's counters only grow.
import { Counter, Gauge, Registry as PromRegistry } from 'prom-client';
import { EXIT_BROKE_CHANNEL, EXIT_REPLACE_ME } from '../core/contracts.ts';
import type { ReplicaCounters } from '../runtime/replica/agent-messages.ts';

/** Longest a scrape waits for Redis to answer before it reports embers_redis_up 0. */
const PING_WITHIN_MS = 1_000;

/** Why a replica process ended: its agent stopped it, it asked to be replaced (a stuck handler, user code out of memory), it died, or it died before it was ever ready. */
export const EXIT_REASONS = ['stopped', 'replaced', 'broke_channel', 'crashed', 'start_failed'] as const;
export type ExitReason = (typeof EXIT_REASONS)[number];

export function exitReason(e: { stopping: boolean; code: number | null; everReady: boolean }): ExitReason {
  if (e.stopping) return 'stopped';
  if (e.code === EXIT_REPLACE_ME) return 'replaced';
  if (e.code === EXIT_BROKE_CHANNEL) return 'broke_channel';
  return e.everReady ? 'crashed' : 'start_failed';
}

/** What grew between a replica's two reports; a count lower than before started again from zero (its user-code process did), and all of it is new. */
export function counterIncrements(prev: ReplicaCounters | undefined, next: ReplicaCounters): ReplicaCounters {
  // Counters come from replicas that checked them (runtime/replica/user-code-channel.ts); a value that is not a count still counts nothing.
  const grew = (now: number, before = 0) => (!Number.isFinite(now) || now < 0 ? 0 : now >= before ? now - before : now);
  const u = next.usage;
  const p = prev?.usage;
  const models: ReplicaCounters['models'] = {};
  for (const [name, m] of Object.entries(next.models)) {
    const b = prev?.models[name];
    models[name] = { calls: grew(m.calls, b?.calls), inferences: grew(m.inferences, b?.inferences), executions: grew(m.executions, b?.executions), inferMs: grew(m.inferMs, b?.inferMs), failures: grew(m.failures, b?.failures) };
  }
  return { usage: { requests: grew(u.requests, p?.requests), computeMs: grew(u.computeMs, p?.computeMs), bytesIn: grew(u.bytesIn, p?.bytesIn), bytesOut: grew(u.bytesOut, p?.bytesOut) }, models };
}

export function createAgentMetrics() {
  const registry = new PromRegistry();
  const registers = [registry];
  const fnLabel = ['function'];
  const modelLabels = ['function', 'model'];
  const starts = new Counter({ name: 'embers_replica_starts_total', help: 'Replica processes this node started, by function', labelNames: fnLabel, registers });
  const exits = new Counter({ name: 'embers_replica_exits_total', help: 'Replica processes that ended on this node, by function and reason (stopped, replaced, crashed, start_failed)', labelNames: ['function', 'reason'], registers });
  const requests = new Counter({ name: 'embers_usage_requests_total', help: 'Requests this node\'s replicas ran to an outcome, by function', labelNames: fnLabel, registers });
  const compute = new Counter({ name: 'embers_usage_compute_seconds_total', help: 'Handler time of the requests this node\'s replicas ran, by function', labelNames: fnLabel, registers });
  const bytes = new Counter({ name: 'embers_usage_bytes_total', help: 'Request (in) and answer (out) bytes of the requests this node\'s replicas ran, by function', labelNames: ['function', 'direction'], registers });
  // Triton's vocabulary: inference_count (rows) over exec_count (executions) is the mean batch.
  const calls = new Counter({ name: 'embers_inference_calls_total', help: 'Model calls from handlers (ctx.models.<name>.run), by function and model', labelNames: modelLabels, registers });
  const rows = new Counter({ name: 'embers_inference_count_total', help: 'Rows inferred, batch rows counted one by one, by function and model', labelNames: modelLabels, registers });
  const executions = new Counter({ name: 'embers_inference_exec_count_total', help: 'Model executions (batches run), by function and model', labelNames: modelLabels, registers });
  const inferTime = new Counter({ name: 'embers_inference_compute_infer_seconds_total', help: 'Time model executions took, by function and model', labelNames: modelLabels, registers });
  const failures = new Counter({ name: 'embers_inference_failures_total', help: 'Model executions that failed, by function and model', labelNames: modelLabels, registers });
  const redisUp = new Gauge({ name: 'embers_redis_up', help: 'Whether Redis answered this scrape (1) or not (0)', registers });
  /** Each running replica's last report, by replica id. */
  const last = new Map<string, ReplicaCounters>();

  return {
    registry,
    /** The text Prometheus reads; `ping` (Redis's PING) sets embers_redis_up. */
    async render(ping: () => Promise<unknown>): Promise<{ contentType: string; body: string }> {
      let timer: NodeJS.Timeout | undefined;
      const late = new Promise<number>((resolve) => (timer = setTimeout(() => resolve(0), PING_WITHIN_MS)));
      redisUp.set(await Promise.race([ping().then(() => 1, () => 0), late]));
      clearTimeout(timer);
      return { contentType: registry.contentType, body: await registry.metrics() };
    },
    /** A replica of `fn` was started: its function's series exist from now on, at zero until something happens. */
    started(fn: string): void {
      starts.inc({ function: fn });
      for (const reason of EXIT_REASONS) exits.inc({ function: fn, reason }, 0);
      for (const c of [requests, compute]) c.inc({ function: fn }, 0);
      for (const direction of ['in', 'out']) bytes.inc({ function: fn, direction }, 0);
    },
    exited(replica: string, fn: string, reason: ExitReason): void {
      exits.inc({ function: fn, reason });
      last.delete(replica);
    },
    reported(replica: string, fn: string, counters: ReplicaCounters): void {
      const inc = counterIncrements(last.get(replica), counters);
      last.set(replica, counters);
      const f = { function: fn };
      requests.inc(f, inc.usage.requests);
      compute.inc(f, inc.usage.computeMs / 1000);
      bytes.inc({ ...f, direction: 'in' }, inc.usage.bytesIn);
      bytes.inc({ ...f, direction: 'out' }, inc.usage.bytesOut);
      for (const [model, m] of Object.entries(inc.models)) {
        const l = { function: fn, model };
        calls.inc(l, m.calls);
        rows.inc(l, m.inferences);
        executions.inc(l, m.executions);
        inferTime.inc(l, m.inferMs / 1000);
        failures.inc(l, m.failures);
      }
    },
  };
}
