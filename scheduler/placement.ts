// Where replicas run: a pure function from desired counts and live nodes to per-node counts.
// Keeps what is already placed, fills the node with the most free room first (spreading
// replicas of one function), and drops what sat on nodes that are gone.
//
// Slots cap the replicas that run requests: a replica of a function with work holds one, an
// idle replica none, and a function with work gets no new replica on a node whose slots are
// all held (one it has keeps running). Memory caps every replica: each holds its function's
// measured footprint, so many small idle functions stay warm where few large ones fit.
// Replicas that run models on CPU also spend cores: each keeps `modelReplicaCores` busy under
// load (its model instances × their threads), so a function's extra replicas go only where the
// node has those cores to spare. A function with work gets its first replica whatever the cores
// and memory, so every function can serve; an idle one (keep-alive, pre-warm) only where its
// footprint fits.

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

export interface PlaceOptions {
  /** Functions whose replicas run models (they spend cores). */
  runsModels?: ReadonlySet<string>;
  /** Functions with work: their replicas hold slots. @default every function */
  working?: ReadonlySet<string>;
  /** Bytes one replica of a function holds (its measured footprint, or an estimate). @default 0 */
  footprint?: (fn: string) => number;
}

export function place(desired: Record<string, number>, nodes: NodeCapacity[], previous: Placement, o: PlaceOptions = {}): Placement {
  const runsModels = o.runsModels ?? new Set<string>();
  const footprint = o.footprint ?? (() => 0);
  const working = (fn: string) => o.working === undefined || o.working.has(fn);
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
    if (working(fn)) for (const [node, count] of Object.entries(kept)) used.set(node, (used.get(node) ?? 0) + count);
  }
  // Over a node's memory (a footprint measured larger than assumed): take back idle replicas,
  // the largest first. Slots never take back a replica that runs: they bound starting more.
  const memory = new Map(nodes.map((n) => [n.id, 0]));
  for (const [fn, perNode] of Object.entries(next)) for (const n of nodes) memory.set(n.id, memory.get(n.id)! + (perNode[n.id] ?? 0) * footprint(fn));
  for (const n of nodes) {
    while (n.memoryBytes !== undefined && memory.get(n.id)! > n.memoryBytes) {
      const idle = Object.keys(next).filter((fn) => !working(fn) && (next[fn][n.id] ?? 0) > 0);
      if (idle.length === 0) break;
      const fn = idle.sort((a, b) => footprint(b) - footprint(a) || a.localeCompare(b))[0];
      next[fn][n.id]--;
      if (next[fn][n.id] === 0) delete next[fn][n.id];
      memory.set(n.id, memory.get(n.id)! - footprint(fn));
    }
  }
  // Cores the model-running replicas placed so far keep busy, per node.
  const cores = new Map(nodes.map((n) => [n.id, 0]));
  const coreCost = (n: NodeCapacity, fn: string) => (runsModels.has(fn) ? (n.modelReplicaCores ?? 0) : 0);
  for (const [fn, perNode] of Object.entries(next)) for (const n of nodes) cores.set(n.id, cores.get(n.id)! + (perNode[n.id] ?? 0) * coreCost(n, fn));
  const coresFree = (n: NodeCapacity, fn: string) => n.cores === undefined || cores.get(n.id)! + coreCost(n, fn) <= n.cores;
  const memoryFree = (n: NodeCapacity, fn: string) => n.memoryBytes === undefined || memory.get(n.id)! + footprint(fn) <= n.memoryBytes;
  const slotFree = (n: NodeCapacity, fn: string) => !working(fn) || used.get(n.id)! < n.slots;
  // Room left on a node, for ordering: free slots for a function with work, free memory for an idle one.
  const roomLeft = (n: NodeCapacity, fn: string) => (working(fn) ? n.slots - used.get(n.id)! : (n.memoryBytes ?? Number.MAX_SAFE_INTEGER) - memory.get(n.id)!);
  // Add what is missing, each on the node with the most room that holds fewest of this fn.
  for (const fn of Object.keys(desired).sort()) {
    let total = Object.values(next[fn]).reduce((a, b) => a + b, 0);
    while (total < desired[fn]) {
      const first = total === 0;
      const candidates = nodes.filter((n) => slotFree(n, fn) && (first || coresFree(n, fn)) && ((first && working(fn)) || memoryFree(n, fn)));
      if (candidates.length === 0) break;
      candidates.sort((a, b) => (next[fn][a.id] ?? 0) - (next[fn][b.id] ?? 0) || roomLeft(b, fn) - roomLeft(a, fn) || a.id.localeCompare(b.id));
      const node = candidates[0].id;
      next[fn][node] = (next[fn][node] ?? 0) + 1;
      if (working(fn)) used.set(node, used.get(node)! + 1);
      cores.set(node, cores.get(node)! + coreCost(candidates[0], fn));
      memory.set(node, memory.get(node)! + footprint(fn));
      total++;
    }
  }
  for (const fn of Object.keys(next)) if (Object.keys(next[fn]).length === 0) delete next[fn];
  return next;
}
