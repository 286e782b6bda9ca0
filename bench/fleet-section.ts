// The fleet section as `npm run bench` runs it: every keep-alive policy over the trace, then
// 1,000 functions at zero; writes bench/results/latest-fleet.json and fleet.svg.
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { deployedAtZero, type DeployedAtZero } from './fleet-deployed.ts';
import { fleetChartSvg, fleetVerdicts, formatFleet, type FleetResult } from './fleet-report.ts';
import { fleetPolicies } from './fleet.ts';

export async function fleetSection(resultsDir: string, log: (line: string) => void, extra: Record<string, unknown>): Promise<FleetResult> {
  const began = performance.now();
  const policies = await fleetPolicies(log);
  let atZero: DeployedAtZero | undefined;
  let atZeroError: string | undefined;
  try {
    atZero = await deployedAtZero(log);
  } catch (err) {
    atZeroError = err instanceof Error ? err.message : String(err);
    log(`fleet: 1,000 functions at zero failed: ${atZeroError}`);
  }
  const result: FleetResult = { ...policies, ...(atZero ? { atZero } : { atZeroError }), verdicts: fleetVerdicts(policies, atZero) };
  await mkdir(resultsDir, { recursive: true });
  await writeFile(path.join(resultsDir, 'latest-fleet.json'), `${JSON.stringify({ ...extra, durationSeconds: (performance.now() - began) / 1000, ...result }, null, 2)}\n`);
  await writeFile(path.join(resultsDir, 'fleet.svg'), fleetChartSvg(result));
  process.stdout.write(`\n${formatFleet(result)}\n`);
  return result;
}
