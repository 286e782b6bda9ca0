// Where replicas run: a pure function from desired counts and live nodes to per-node counts.
// Keeps what is already placed, fills the node with the most free slots first (spreading
// replicas of one function), and drops what sat on nodes that are gone.
//
// Replicas that run models on CPU also spend cores: each keeps `modelReplicaCores` busy under
// load (its model instances × their threads). A function's extra replicas go only where the
// node has those cores to spare; on a node without them another replica adds processes, cold
// starts and contention, not throughput. Likewise memory: each replica holds its function's
// measured footprint, and extra replicas go only where the node's memory budget has room for
// it. A function's first replica is placed whatever the cores and memory, so every function
// can serve.

export interface NodeCapacity {
  id: string;
  slots: number;
  /** CPU cores; unset: not limited by cores. */
  cores?: number;
  /** Cores one model-running replica keeps busy on this node (0 on GPU nodes). @default 0 */
  modelReplicaCores?: number;
  /** Memory its replicas may hold together (bytes); unset: not limited by memory. */
  memoryBytes?: number;
}

/** fn → node → replica count. */
export type Placement = Record<string, Record<string, number>>;

/** `footprint`: the bytes one replica of a function holds (its measured footprint, or an estimate). */
export function place(desired: Record<string, number>, nodes: NodeCapacity[], previous: Placement, runsModels: ReadonlySet<string> = new Set(), footprint: (fn: string) => number = () => 0): Placement {
  const live = new Set(nodes.map((n) => n.id));
  const next: Placement = {};
  const used = new Map(nodes.map((n) => [n.id, 0]));
  // Keep existing placements on live nodes, trimmed to what is desired (most-loaded node first).
  for (const fn of Object.keys(desired).sort()) {
    const kept: Record<string, number> = {};
    for (const [node, count] of Object.entries(previous[fn] ?? {})) if (live.has(node) && count > 0) kept[node] = count;
    let total = Object.values(kept).reduce((a, b) => a + b, 0);
    while (total > desired[fn]) {
      const busiest = Object.keys(kept).sort((a, b) => kept[b] - kept[a] || a.localeCompare(b))[0];
      kept[busiest]--;
      if (kept[busiest] === 0) delete kept[busiest];
      total--;
    }
    next[fn] = kept;
    for (const [node, count] of Object.entries(kept)) used.set(node, (used.get(node) ?? 0) + count);
  }
  // Over capacity after a node loss: take back from the largest functions on full nodes.
  for (const n of nodes) {
    while ((used.get(n.id) ?? 0) > n.slots) {
      const fn = Object.keys(next).sort((a, b) => (next[b][n.id] ?? 0) - (next[a][n.id] ?? 0))[0];
      next[fn][n.id]--;
      if (next[fn][n.id] === 0) delete next[fn][n.id];
      used.set(n.id, used.get(n.id)! - 1);
    }
  }
  // Cores the model-running replicas placed so far keep busy, per node.
  const cores = new Map(nodes.map((n) => [n.id, 0]));
  const coreCost = (n: NodeCapacity, fn: string) => (runsModels.has(fn) ? (n.modelReplicaCores ?? 0) : 0);
  for (const [fn, perNode] of Object.entries(next)) for (const n of nodes) cores.set(n.id, cores.get(n.id)! + (perNode[n.id] ?? 0) * coreCost(n, fn));
  const coresFree = (n: NodeCapacity, fn: string) => n.cores === undefined || cores.get(n.id)! + coreCost(n, fn) <= n.cores;
  // Memory the replicas placed so far hold, per node.
  const memory = new Map(nodes.map((n) => [n.id, 0]));
  for (const [fn, perNode] of Object.entries(next)) for (const n of nodes) memory.set(n.id, memory.get(n.id)! + (perNode[n.id] ?? 0) * footprint(fn));
  const memoryFree = (n: NodeCapacity, fn: string) => n.memoryBytes === undefined || memory.get(n.id)! + footprint(fn) <= n.memoryBytes;
  // Add what is missing, each on the node with the most free slots that holds fewest of this fn.
  for (const fn of Object.keys(desired).sort()) {
    let total = Object.values(next[fn]).reduce((a, b) => a + b, 0);
    while (total < desired[fn]) {
      const candidates = nodes.filter((n) => (used.get(n.id) ?? 0) < n.slots && (total === 0 || (coresFree(n, fn) && memoryFree(n, fn))));
      if (candidates.length === 0) break;
      candidates.sort((a, b) => (next[fn][a.id] ?? 0) - (next[fn][b.id] ?? 0) || b.slots - used.get(b.id)! - (a.slots - used.get(a.id)!) || a.id.localeCompare(b.id));
      const node = candidates[0].id;
      next[fn][node] = (next[fn][node] ?? 0) + 1;
      used.set(node, used.get(node)! + 1);
      cores.set(node, cores.get(node)! + coreCost(candidates[0], fn));
      memory.set(node, memory.get(node)! + footprint(fn));
      total++;
    }
  }
  for (const fn of Object.keys(next)) if (Object.keys(next[fn]).length === 0) delete next[fn];
  return next;
}
