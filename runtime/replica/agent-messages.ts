// What a node agent (scheduler/agent.ts) and its runtime processes (runtime/replica/main.ts) say to each
// other over IPC.

/** Agent → a standby runtime: become a replica of this function version. */
export interface Assignment {
  type: 'assign';
  id: string;
  fn: string;
  version: string;
  /** When the agent decided to start this replica (ms since epoch): the spawn phase starts here. */
  spawnedAt: number;
  env?: Record<string, string>;
}

/**
 * What a replica has done since it started, sent to its agent with every heartbeat for the
 * agent's /metrics (scheduler/agent-metrics.ts). Counts only grow, but start again from zero
 * when the user-code process does.
 */
export interface ReplicaCounters {
  /** Requests it ran to an outcome, their handler time, and the bytes they took and gave (as metered). */
  usage: { requests: number; computeMs: number; bytesIn: number; bytesOut: number };
  /** Per model, its batcher's counts: calls from handlers, rows, executions, their time, failed executions. */
  models: Record<string, { calls: number; inferences: number; executions: number; inferMs: number; failures: number }>;
}

/** Runtime → agent: booted and waiting for an assignment (standby), serving (ready), or its counters. */
export type ToAgent = { type: 'standby' } | { type: 'ready' } | { type: 'counters'; counters: ReplicaCounters };
