// What /readyz says about sandboxing: per node agent, whether it isolates user code and what it
// cannot enforce, so an operator sees a node that runs only the default tenant's functions.
import type { Redis } from 'ioredis';
import { type NodeRecord } from '../core/contracts.ts';
import { keys } from '../core/keys.ts';

export interface SandboxReport {
  /** Every live node isolates user code. */
  ok: boolean;
  nodes: { id: string; isolates: boolean; runs: 'every tenant' | 'default tenant only'; missing: string[] }[];
}

export async function sandboxReport(redis: Redis): Promise<SandboxReport | 'unknown'> {
  try {
    const ids = await redis.smembers(keys.nodes);
    const records = ids.length ? await redis.mget(ids.map(keys.node)) : [];
    const nodes = records
      .filter((r): r is string => !!r)
      .map((r) => JSON.parse(r) as NodeRecord)
      .filter((n) => n.sandbox)
      .map((n) => ({
        id: n.id,
        isolates: n.sandbox!.isolates,
        runs: n.sandbox!.isolates || n.sandbox!.unsandboxedAllowed ? ('every tenant' as const) : ('default tenant only' as const),
        missing: n.sandbox!.missing,
      }));
    return { ok: nodes.every((n) => n.isolates), nodes };
  } catch {
    return 'unknown';
  }
}
