// What a node agent (scheduler/agent.ts) and its runtime processes (runtime/main.ts) say to each
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

/** Runtime → agent: booted and waiting for an assignment (standby), or serving (ready). */
export type ToAgent = { type: 'standby' } | { type: 'ready' };
