// A batch's input lines as the feeder reads them: parsed and checked one by one, and the ones
// that cannot be queued (JSON.stringify refuses their input) set apart to be answered as errors.
import type { BatchChunkLine } from '../core/contracts.ts';
import type { chunkJob, lineJob } from '../core/batches.ts';
import { nestsDeeperThan, tooDeepMessage } from '../core/json-depth.ts';

export type FeedJob = ReturnType<typeof lineJob> | ReturnType<typeof chunkJob>;

/**
 * The lines among `jobs` whose input JSON.stringify cannot write (so BullMQ cannot queue them),
 * and the jobs without them: a chunk keeps its id (its first line's) with the lines left.
 */
export function splitUnwritable(jobs: FeedJob[]): { queueable: FeedJob[]; unwritable: { line: number; cid: string; reason: string }[] } {
  const unwritable: { line: number; cid: string; reason: string }[] = [];
  const writable = (l: Pick<BatchChunkLine, 'line' | 'cid' | 'input'>): boolean => {
    try {
      JSON.stringify(l.input);
      return true;
    } catch (err) {
      unwritable.push({ line: l.line, cid: l.cid, reason: (err as Error).message });
      return false;
    }
  };
  const queueable: FeedJob[] = [];
  for (const job of jobs) {
    if ('chunk' in job.data) {
      const kept = job.data.chunk.lines.filter(writable);
      if (kept.length === job.data.chunk.lines.length) queueable.push(job);
      else if (kept.length > 0) queueable.push({ ...job, data: { ...job.data, chunk: { ...job.data.chunk, lines: kept } } });
    } else if (writable({ line: job.data.batch!.line, cid: job.data.batch!.cid, input: job.data.input })) queueable.push(job);
  }
  return { queueable, unwritable };
}

/**
 * One input line: `{ "custom_id": "…", "input": … }`, or why it is not one. An input nesting
 * more than `maxDepth` arrays and objects is refused before anything walks it.
 */
export function parseLine(text: string, maxDepth: number): { cid: string; input: unknown } | { error: { code: string; message: string }; cid?: string } {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch (err) {
    return { error: { code: 'invalid_json', message: `line is not valid JSON: ${(err as Error).message}` } };
  }
  if (typeof v !== 'object' || v === null || Array.isArray(v)) return { error: { code: 'invalid_line', message: 'each line must be a JSON object {"custom_id": "…", "input": {…}}' } };
  const { custom_id: cid, input } = v as { custom_id?: unknown; input?: unknown };
  if (typeof cid !== 'string' || cid === '') return { error: { code: 'missing_custom_id', message: 'line has no "custom_id" (a non-empty string)' } };
  // The input, as a run's body would be: it is what BullMQ and the replica walk.
  if (nestsDeeperThan(input, maxDepth)) return { error: { code: 'too_deep', message: tooDeepMessage('input', maxDepth) }, cid };
  return { cid, input };
}
