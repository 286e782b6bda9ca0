// Number and table formatting shared by the bench's printed sections.
import type { LoadResult } from './load.ts';
import { cpuPerRequestByRole, type Measured } from './result.ts';

export const num = (n: number | undefined, digits = 1): string => (n === undefined || !Number.isFinite(n) ? '-' : n.toFixed(digits));

export function table(header: string[], rows: string[][]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)));
  const line = (cells: string[]) => cells.map((c, i) => (i === 0 ? c.padEnd(widths[i]) : c.padStart(widths[i]))).join('  ');
  return [line(header), widths.map((w) => '-'.repeat(w)).join('  '), ...rows.map(line)].join('\n');
}

export const errorsNote = (name: string, r: LoadResult): string[] =>
  r.errors || r.abandoned ? [`  ! ${name} c=${r.concurrency}: ${r.errors} errors, ${r.abandoned} abandoned; first: ${r.firstError ?? '-'}`] : [];

/** CPU µs per request by role, largest first: `gateway+agent 128 + replicas 56 + …`. */
export const cpuByRole = (m: Pick<Measured, 'cores' | 'reqPerSec'>): string =>
  Object.entries(cpuPerRequestByRole(m))
    .sort((a, b) => b[1] - a[1])
    .map(([role, us]) => `${role} ${num(us, 0)}`)
    .join(' + ');
