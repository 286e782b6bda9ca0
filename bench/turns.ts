// Two sides taking turns, with the CPU each process used meanwhile.
import { coresByRole, sampleCpu } from './cpu.ts';
import { closedLoopRun, poolRuns, type LoadRun, type Target } from './load.ts';
import type { Measured } from './result.ts';
import type { Window } from './stats.ts';

/** One side of the turns: an HTTP target under closed-loop load, or a run of its own for the window it is given. */
export type Side = Target | ((window: Window) => Promise<LoadRun>);

/**
 * `a` and `b` in the order a, b, b, a, each for half the window, pooled per side: a drift
 * of the machine over the four runs (these VMs drift by up to 2× within minutes) cancels to
 * first order in a ÷ b, where a then b would put it all on the ratio. `concurrency` is the HTTP
 * targets'.
 */
export async function takeTurns(groups: number[], window: Window, a: Side, b: Side, concurrency: number): Promise<[Measured, Measured]> {
  const [x, y] = await takeTurnsOf(groups, window, [a, b], concurrency);
  return [x, y];
}

/** Any number of sides, in order and then in reverse (a, b, c, c, b, a), pooled per side as takeTurns does. */
export async function takeTurnsOf(groups: number[], window: Window, sides: Side[], concurrency: number): Promise<Measured[]> {
  const half = { warmupMs: window.warmupMs, measureMs: window.measureMs / 2 };
  const runs: { run: LoadRun; cores: Record<string, number>; seconds: number }[][] = sides.map(() => []);
  const order = [...sides.keys(), ...[...sides.keys()].reverse()];
  for (const i of order) {
    const side = sides[i];
    const cpu0 = sampleCpu(groups);
    const t0 = performance.now();
    const run = typeof side === 'function' ? await side(half) : await closedLoopRun(side, { concurrency, window: half });
    const seconds = (performance.now() - t0) / 1000;
    runs[i].push({ run, cores: coresByRole(cpu0, sampleCpu(groups), seconds), seconds });
  }
  const pooled = (parts: (typeof runs)[number]): Measured => {
    const total = parts.reduce((n, p) => n + p.seconds, 0);
    const cores: Record<string, number> = {};
    for (const p of parts) for (const [role, n] of Object.entries(p.cores)) cores[role] = (cores[role] ?? 0) + (n * p.seconds) / total;
    return { ...poolRuns(parts.map((p) => p.run)), cores, runsReqPerSec: parts.map((p) => p.run.result.reqPerSec) };
  };
  return runs.map(pooled);
}
