// What composing functions costs (issue 46): `ocr` as one handler against `ocr-split`, a thin
// handler that calls `ocr-det` and then `ocr-rec` (bench/functions), each queued, scaled and
// batched as a function of its own, taking turns at c = 8 and 32; and one call hop alone,
// `echo-call` (a handler answering `ctx.call('echo', input)`) against `echo`, taking turns at
// c = 1 (what a hop adds to the p50) and c = 32 (what it adds in CPU per request, every process
// counted). On an `embers dev` of its own: its six functions need replica slots.
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { cpuByRole, errorsNote, num, table } from './format.ts';
import { ocrText, testImage } from './image.ts';
import { closedLoop, type Target } from './load.ts';
import { cpuPerRequestUs, type Measured } from './result.ts';
import { batchDelta, deployFunctions, ECHO_BODY, echoTarget, settledCounters, startEmbers, type CounterSnapshot, type EmbersServer } from './servers.ts';
import { sleep, windowFromEnv, type Window } from './stats.ts';
import { takeTurns } from './turns.ts';

export const SPLIT_CONCURRENCIES = [8, 32];
/** Where a hop's latency is taken (nothing queued behind it) and where its CPU is (the overhead section's point). */
export const HOP_LATENCY_CONCURRENCY = 1;
export const HOP_CPU_CONCURRENCY = 32;
const FILES = ['bench/functions/ocr-det.ts', 'bench/functions/ocr-rec.ts', 'bench/functions/ocr-split.ts', 'bench/functions/echo-call.ts'];
const OCR_FUNCTIONS = ['ocr', 'ocr-split', 'ocr-det', 'ocr-rec'] as const;
/** The first answers of `ocr-split` and `echo-call` wait for their callees' cold starts too. */
const FIRST_ANSWER_MS = 240_000;

export interface SplitSide extends Measured {
  /** Rec rows per execution over the point (`ocr`'s rec model, or `ocr-rec`'s). */
  recRowsPerExec?: number;
}

export interface SplitPoint {
  concurrency: number;
  ocr: SplitSide;
  split: SplitSide;
  /** split req/s ÷ ocr req/s. */
  reqPerSecRatio: number;
  /** split p50 ÷ ocr p50. */
  p50Ratio: number;
  /** Ready replicas of each function a heartbeat after the point. */
  replicas: Record<string, number>;
}

export interface HopPoint {
  concurrency: number;
  echo: Measured;
  echoCall: Measured;
  /** echo-call req/s ÷ echo req/s. */
  reqPerSecRatio: number;
  /** echo-call p50 − echo p50, ms. */
  addedP50Ms: number;
  /** echo-call's CPU µs per request − echo's, every process counted (load generator included). */
  addedCpuUs: number;
}

export interface SplitSection {
  /** The recognised text of the test image from each, and whether their lines agree (text and box). */
  outputs: { ocr: string; split: string; match: boolean };
  points: SplitPoint[];
  hops: HopPoint[];
  /** A hop's latency: echo-call p50 − echo p50 at HOP_LATENCY_CONCURRENCY, ms. */
  hopAddedP50Ms: number;
  /** A hop's CPU: echo-call − echo, µs per request at HOP_CPU_CONCURRENCY. */
  hopAddedCpuUs: number;
  seconds: number;
}

interface OcrAnswer {
  lines: { text: string; score: number; box: number[][] }[];
}

export async function splitSection(o: { embers: EmbersServer; groups: number[]; window: Window; log: (line: string) => void }): Promise<SplitSection> {
  const t0 = performance.now();
  const { embers, log } = o;
  log(`split: deploying ${FILES.map((f) => path.basename(f, '.ts')).join(', ')}`);
  await deployFunctions(embers, FILES);
  const headers = { authorization: `Bearer ${embers.apiKey}`, 'content-type': 'application/json' };
  const target = (name: string, body: string): Target => ({ port: embers.port, method: 'POST', path: `/v1/run/${name}`, headers, body: Buffer.from(body) });
  const ocrBody = JSON.stringify({ image: await testImage() });
  const [ocr, split] = [target('ocr', ocrBody), target('ocr-split', ocrBody)];
  const [echo, echoCall] = [echoTarget(embers), target('echo-call', ECHO_BODY)];

  log('split: first answers of ocr, ocr-split and echo-call (the callees start on their first calls)');
  const ocrAnswer = (await firstAnswer(embers, 'ocr', ocrBody)) as OcrAnswer;
  const splitAnswer = (await firstAnswer(embers, 'ocr-split', ocrBody)) as OcrAnswer;
  await firstAnswer(embers, 'echo-call', ECHO_BODY);
  const outputs = { ocr: ocrText(ocrAnswer), split: ocrText(splitAnswer), match: sameLines(ocrAnswer, splitAnswer) };
  if (!outputs.match) log(`split: the answers differ: ocr ${JSON.stringify(ocrAnswer)}, ocr-split ${JSON.stringify(splitAnswer)}`);
  // Past the first inferences of every model (session warm-up, the batch tuners' first sizes).
  await Promise.all([ocr, split].map((t) => closedLoop(t, { concurrency: 8, window: { warmupMs: 1000, measureMs: 2000 } })));

  // The rec model's counters: `ocr`'s, and `ocr-rec`'s for the split.
  const settled = async (): Promise<{ whole: CounterSnapshot; split: CounterSnapshot }> => {
    const [whole, split] = await Promise.all([settledCounters(embers, 'ocr'), settledCounters(embers, 'ocr-rec')]);
    return { whole, split };
  };
  const points: SplitPoint[] = [];
  let before = await settled();
  for (const concurrency of SPLIT_CONCURRENCIES) {
    log(`split c=${concurrency}: ocr, ocr-split, ocr-split, ocr`);
    const [a, b] = await takeTurns(o.groups, o.window, ocr, split, concurrency);
    const after = await settled();
    const replicas = Object.fromEntries(await Promise.all(OCR_FUNCTIONS.map(async (name) => [name, (await embers.describe(name)).replicas.filter((r) => r.state === 'ready').length] as const)));
    points.push({
      concurrency,
      ocr: { ...a, recRowsPerExec: batchDelta(before.whole, after.whole).rec?.meanBatch },
      split: { ...b, recRowsPerExec: batchDelta(before.split, after.split).rec?.meanBatch },
      reqPerSecRatio: b.reqPerSec / a.reqPerSec,
      p50Ratio: b.latencyMs.p50 / a.latencyMs.p50,
      replicas,
    });
    before = after;
    log(`split c=${concurrency}: ocr ${a.reqPerSec.toFixed(2)} req/s p50 ${a.latencyMs.p50.toFixed(1)} ms, ocr-split ${b.reqPerSec.toFixed(2)} req/s p50 ${b.latencyMs.p50.toFixed(1)} ms`);
  }

  const hops: HopPoint[] = [];
  for (const concurrency of [HOP_LATENCY_CONCURRENCY, HOP_CPU_CONCURRENCY]) {
    log(`call hop c=${concurrency}: echo, echo-call, echo-call, echo`);
    const [e, c] = await takeTurns(o.groups, o.window, echo, echoCall, concurrency);
    hops.push({ concurrency, echo: e, echoCall: c, reqPerSecRatio: c.reqPerSec / e.reqPerSec, addedP50Ms: c.latencyMs.p50 - e.latencyMs.p50, addedCpuUs: cpuPerRequestUs(c) - cpuPerRequestUs(e) });
    log(`call hop c=${concurrency}: echo ${e.reqPerSec.toFixed(0)} req/s p50 ${e.latencyMs.p50.toFixed(2)} ms, echo-call ${c.reqPerSec.toFixed(0)} req/s p50 ${c.latencyMs.p50.toFixed(2)} ms`);
  }
  const hopAt = (c: number) => hops.find((h) => h.concurrency === c)!;
  return {
    outputs,
    points,
    hops,
    hopAddedP50Ms: hopAt(HOP_LATENCY_CONCURRENCY).addedP50Ms,
    hopAddedCpuUs: hopAt(HOP_CPU_CONCURRENCY).addedCpuUs,
    seconds: (performance.now() - t0) / 1000,
  };
}

/**
 * The function's first 2xx answer, asked again until one comes: a caller's first requests may
 * time out while its callees start from zero, one after the other.
 */
async function firstAnswer(embers: EmbersServer, name: string, body: string): Promise<unknown> {
  const end = Date.now() + FIRST_ANSWER_MS;
  for (;;) {
    const res = await fetch(`http://127.0.0.1:${embers.port}/v1/run/${name}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${embers.apiKey}`, 'content-type': 'application/json' },
      body,
      signal: AbortSignal.timeout(FIRST_ANSWER_MS),
    }).catch((err: Error) => err);
    if (!(res instanceof Error) && res.ok) return res.json();
    const why = res instanceof Error ? res.message : `${res.status} ${(await res.text()).slice(0, 300)}`;
    if (Date.now() > end) throw new Error(`${name} gave no answer within ${FIRST_ANSWER_MS / 1000} s: ${why}\n${embers.child.tail}`);
    await sleep(1000);
  }
}

/** The same lines in the same order with the same boxes (scores may differ in the last digits with how rows were batched). */
function sameLines(a: OcrAnswer, b: OcrAnswer): boolean {
  if (!Array.isArray(a?.lines) || !Array.isArray(b?.lines) || a.lines.length !== b.lines.length) return false;
  return a.lines.every((l, i) => l.text === b.lines[i].text && JSON.stringify(l.box) === JSON.stringify(b.lines[i].box));
}

export function formatSplit(s: SplitSection): string[] {
  const at = (c: number) => s.hops.find((h) => h.concurrency === c);
  const cpuHop = at(HOP_CPU_CONCURRENCY);
  return [
    `Composition: \`ocr\` (one handler) against \`ocr-split\` (a handler calling ocr-det, then ocr-rec), taking turns ocr, ocr-split, ocr-split, ocr; the same lines: ${s.outputs.match ? 'yes' : `NO (ocr "${s.outputs.ocr}", ocr-split "${s.outputs.split}")`}`,
    table(
      ['conc', 'ocr req/s', 'p50', 'p99', 'rec rows/exec', 'CPU µs/req', 'split req/s', 'p50', 'p99', 'call ms', 'rec rows/exec', 'CPU µs/req', '÷ req/s', '÷ p50'],
      s.points.map((p) => [
        String(p.concurrency),
        num(p.ocr.reqPerSec, 2),
        num(p.ocr.latencyMs.p50, 1),
        num(p.ocr.latencyMs.p99, 1),
        num(p.ocr.recRowsPerExec, 2),
        num(cpuPerRequestUs(p.ocr), 0),
        num(p.split.reqPerSec, 2),
        num(p.split.latencyMs.p50, 1),
        num(p.split.latencyMs.p99, 1),
        num(p.split.serverTiming?.call, 1),
        num(p.split.recRowsPerExec, 2),
        num(cpuPerRequestUs(p.split), 0),
        num(p.reqPerSecRatio, 2),
        num(p.p50Ratio, 2),
      ]),
    ),
    ...s.points.map((p) => `  c=${p.concurrency} ready replicas after the point: ${Object.entries(p.replicas).map(([name, n]) => `${name} ${n}`).join(', ')}`),
    ...s.points.flatMap((p) => [...errorsNote('ocr', p.ocr), ...errorsNote('ocr-split', p.split)]),
    'One call hop: `echo-call` (its handler answers `ctx.call(\'echo\', input)`) against `echo`, taking turns echo, echo-call, echo-call, echo',
    table(
      ['conc', 'echo req/s', 'p50', 'CPU µs/req', 'echo-call req/s', 'p50', 'call ms', 'CPU µs/req', '÷ req/s', '+ p50 ms', '+ CPU µs'],
      s.hops.map((h) => [
        String(h.concurrency),
        num(h.echo.reqPerSec, 0),
        num(h.echo.latencyMs.p50, 2),
        num(cpuPerRequestUs(h.echo), 0),
        num(h.echoCall.reqPerSec, 0),
        num(h.echoCall.latencyMs.p50, 2),
        num(h.echoCall.serverTiming?.call, 2),
        num(cpuPerRequestUs(h.echoCall), 0),
        num(h.reqPerSecRatio, 2),
        num(h.addedP50Ms, 2),
        num(h.addedCpuUs, 0),
      ]),
    ),
    ...(cpuHop ? [`  c=${cpuHop.concurrency} echo: ${cpuByRole(cpuHop.echo)}`, `  c=${cpuHop.concurrency} echo-call: ${cpuByRole(cpuHop.echoCall)}`] : []),
    ...s.hops.flatMap((h) => [...errorsNote('echo', h.echo), ...errorsNote('echo-call', h.echoCall)]),
  ];
}

/** The summary lines (no targets: issue 46 asks for the figures). */
export function splitSummaryLines(s: SplitSection): string[] {
  return [
    `  split_vs_ocr       ${s.points.map((p) => `c=${p.concurrency}: req/s ×${num(p.reqPerSecRatio, 2)}, p50 ×${num(p.p50Ratio, 2)}`).join('; ')}  (no target)`,
    `  call_hop           +${num(s.hopAddedP50Ms, 2)} ms p50 at c=${HOP_LATENCY_CONCURRENCY}, +${num(s.hopAddedCpuUs, 0)} µs CPU a request at c=${HOP_CPU_CONCURRENCY}  (no target)`,
  ];
}

/** The section on an `embers dev` of its own (its functions need replica slots the earlier sections' replicas may hold). */
export async function splitOnFreshEmbers(window: Window, log: (line: string) => void): Promise<SplitSection> {
  log('split: starting embers dev');
  const embers = await startEmbers({ ocr: JSON.stringify({ image: await testImage() }), echo: ECHO_BODY });
  try {
    return await splitSection({ embers, groups: [embers.child.pid!], window, log });
  } finally {
    await embers.stop();
  }
}

/** `BENCH_ONLY=split`: the section alone (latest-split.json). */
export async function splitOnly(results: string, log: (line: string) => void, meta: Record<string, unknown>): Promise<SplitSection> {
  const window = windowFromEnv();
  const split = await splitOnFreshEmbers(window, log);
  await mkdir(results, { recursive: true });
  await writeFile(path.join(results, 'latest-split.json'), `${JSON.stringify({ ...meta, window, split }, null, 2)}\n`);
  process.stdout.write(`\n${formatSplit(split).join('\n')}\n\nSummary:\n${splitSummaryLines(split).join('\n')}\n`);
  return split;
}
