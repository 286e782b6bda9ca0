// Bulk batches in the bench: a 100k-line echo batch and an ocr batch (items/s against the live
// and raw limits), and live ocr p99 at concurrency 1 with and without a batch running.
import type { BatchView } from '../core/batches.ts';
import { closedLoop, closedLoopRun, poolRuns, type LoadRun, type SlowAnswer, type Target } from './load.ts';
import { sleep, type Window } from './stats.ts';

export interface BatchRun {
  lines: number;
  /** From in_progress to completed (feeding and running), s. */
  seconds: number;
  /** Including validation and writing the output files, s. */
  endToEndSeconds: number;
  itemsPerSec: number;
  failed: number;
}

export interface BatchSection {
  echo: BatchRun;
  ocr: BatchRun;
  /** Raw's pipeline (its fastest setting) measured just before and just after the ocr batch, req/s. */
  rawAround: [number, number];
  live: LiveUnderBatch;
  /** The same with a pause of SPORADIC_THINK_MS after each answer: the batch runs in the gaps. */
  sporadic: LiveUnderBatch & { thinkMs: number };
  ratios: {
    /** echo batch items/s ÷ live echo req/s (the queue path's own limit). */
    echo_batch_vs_live: number;
    /** ocr batch items/s ÷ raw in-process pipeline req/s (the mean of rawAround). Target ≥ 0.9. */
    ocr_batch_vs_raw: number;
    /** live p99 with a batch running ÷ without. Target ≤ 1.2. */
    live_p99_with_batch: number;
  };
}

export interface LiveUnderBatch {
  /** Without a batch: half the window before it and half after it, pooled. */
  p99WithoutMs: number;
  /** p99 of each half without a batch (before, after): how far the machine moved meanwhile. */
  p99WithoutRunsMs: [number, number];
  p99WithMs: number;
  p50WithoutMs: number;
  p50WithMs: number;
  requests: number;
  /** Batch lines finished while live requests were measured. */
  batchLinesDuring: number;
  /** The slowest answers with the batch running, with their Server-Timing: whether a batch inference (batch wait, infer) or the machine slowed them. */
  slowestWith?: SlowAnswer[];
  /** The same without it (both halves). */
  slowestWithout?: SlowAnswer[];
}

const SPORADIC_THINK_MS = 250;
/** Windows the live p99 with and without a batch is measured over (the target's point). */
const LIVE_P99_WINDOWS = 3;

export const ECHO_BATCH_LINES = Number(process.env.BENCH_ECHO_BATCH_LINES ?? 100_000);

type Api = (method: string, route: string, body?: string) => Promise<unknown>;

async function runBatch(api: Api, fn: string, jsonl: string, log: (l: string) => void): Promise<BatchRun> {
  const created = (await api('POST', `/v1/batches?function=${fn}`, jsonl)) as BatchView;
  let b = created;
  let lastLog = 0;
  while (!['completed', 'failed', 'cancelled'].includes(b.status)) {
    await sleep(250);
    b = (await api('GET', `/v1/batches/${created.id}`)) as BatchView;
    if (performance.now() - lastLog > 5_000) {
      lastLog = performance.now();
      log(`  ${fn} batch ${b.status}: ${b.request_counts.completed + b.request_counts.failed}/${b.request_counts.total}`);
    }
  }
  if (b.status !== 'completed') throw new Error(`${fn} batch ended ${b.status}: ${b.error ?? ''}`);
  const t = (s?: string) => (s ? Date.parse(s) : Number.NaN);
  const seconds = (t(b.completedAt) - t(b.inProgressAt)) / 1000;
  return {
    lines: b.request_counts.total,
    seconds,
    endToEndSeconds: (t(b.completedAt) - t(b.createdAt)) / 1000,
    itemsPerSec: b.request_counts.total / seconds,
    failed: b.request_counts.failed,
  };
}

export async function batchSection(o: {
  port: number;
  apiKey: string;
  ocrBody: Buffer;
  window: Window;
  echoLiveReqPerSec: number;
  /** Raw's rate at the start of the run: sizes the ocr batches. */
  rawOcrReqPerSec: number;
  /** Raw's pipeline as a turn (bench/raw.ts rawPipelineSide): measured around the ocr batch, so the machine's drift since the start of the run stays out of the ratio. */
  raw: (w: Window) => Promise<LoadRun>;
  log: (l: string) => void;
}): Promise<BatchSection> {
  const api: Api = async (method, route, body) => {
    const res = await fetch(`http://127.0.0.1:${o.port}${route}`, { method, headers: { authorization: `Bearer ${o.apiKey}` }, body });
    if (!res.ok) throw new Error(`${method} ${route}: ${res.status} ${await res.text()}`);
    return res.json();
  };
  const input = JSON.parse(o.ocrBody.toString()) as { image: string };

  o.log(`batch: ${ECHO_BATCH_LINES} echo lines`);
  const echoLines = Array.from({ length: ECHO_BATCH_LINES }, (_, i) => `{"custom_id":"e${i}","input":{"i":${i}}}`).join('\n');
  const echo = await runBatch(api, 'echo', echoLines, o.log);

  // Enough ocr lines for ~20 s at the raw rate.
  const ocrLines = Math.max(50, Math.round(o.rawOcrReqPerSec * 20));
  const line = (i: number) => JSON.stringify({ custom_id: `o${i}`, input });
  const rawTurn = async (when: string) => {
    o.log(`batch: raw ocr pipeline ${when} the ocr batch`);
    return (await o.raw(o.window)).result.reqPerSec;
  };
  const rawBefore = await rawTurn('before');
  o.log(`batch: ${ocrLines} ocr lines`);
  const ocr = await runBatch(api, 'ocr', Array.from({ length: ocrLines }, (_, i) => line(i)).join('\n'), o.log);
  const rawAround: [number, number] = [rawBefore, await rawTurn('after')];

  const target: Target = { port: o.port, method: 'POST', path: '/v1/run/ocr', headers: { authorization: `Bearer ${o.apiKey}`, 'content-type': 'application/json' }, body: o.ocrBody };
  // Live ocr at c=1 without a batch for half the window, then under a batch that outlasts the
  // measurement (started, given time to fill its queue, then measured under), then without it
  // again for the other half: the two halves pooled, so a drift of the machine over the three
  // runs cancels to first order (one run before and one under put it all on the ratio: ×1.33
  // in one run here where the same sequence in a scratch harness gave ×0.80 and ×0.78). Back to
  // back, then with a pause after each answer.
  const underBatch = async (thinkMs: number, window: Window): Promise<LiveUnderBatch> => {
    const what = thinkMs ? `c=1 with ${thinkMs} ms between requests` : 'c=1';
    const half = { ...window, measureMs: window.measureMs / 2 };
    o.log(`live ocr ${what} without a batch`);
    const before = await closedLoopRun(target, { concurrency: 1, window: half, thinkMs });
    const lines = Math.round(o.rawOcrReqPerSec * ((window.warmupMs + window.measureMs) / 1000 + 30));
    const big = (await api('POST', '/v1/batches?function=ocr', Array.from({ length: lines }, (_, i) => line(i)).join('\n'))) as BatchView;
    let running = big;
    while (running.status === 'validating' || running.request_counts.completed < 5) {
      await sleep(200);
      running = (await api('GET', `/v1/batches/${big.id}`)) as BatchView;
    }
    const doneBefore = running.request_counts.completed;
    o.log(`live ocr ${what} with a ${lines}-line ocr batch running`);
    const withBatch = await closedLoop(target, { concurrency: 1, window, thinkMs });
    const after = (await api('GET', `/v1/batches/${big.id}`)) as BatchView;
    await api('POST', `/v1/batches/${big.id}/cancel`);
    if (after.status !== 'in_progress') o.log(`warning: the batch was ${after.status} by the end of the live measurement`);
    while (!['cancelled', 'completed', 'failed'].includes(((await api('GET', `/v1/batches/${big.id}`)) as BatchView).status)) await sleep(250);
    o.log(`live ocr ${what} without a batch again`);
    const afterRun = await closedLoopRun(target, { concurrency: 1, window: half, thinkMs });
    const without = poolRuns([before, afterRun]);
    return {
      p99WithoutMs: without.latencyMs.p99,
      p99WithoutRunsMs: [before.result.latencyMs.p99, afterRun.result.latencyMs.p99],
      p99WithMs: withBatch.latencyMs.p99,
      p50WithoutMs: without.latencyMs.p50,
      p50WithMs: withBatch.latencyMs.p50,
      requests: withBatch.requests,
      batchLinesDuring: after.request_counts.completed - doneBefore,
      ...(withBatch.slowest ? { slowestWith: withBatch.slowest } : {}),
      ...(without.slowest ? { slowestWithout: without.slowest } : {}),
    };
  };
  // The target's point is measured over 3 windows: a p99 of one window's ~75 answers is its worst one.
  const live = await underBatch(0, { ...o.window, measureMs: o.window.measureMs * LIVE_P99_WINDOWS });
  const sporadic = { ...(await underBatch(SPORADIC_THINK_MS, o.window)), thinkMs: SPORADIC_THINK_MS };

  return {
    echo,
    ocr,
    rawAround,
    live,
    sporadic,
    ratios: {
      echo_batch_vs_live: echo.itemsPerSec / o.echoLiveReqPerSec,
      ocr_batch_vs_raw: ocr.itemsPerSec / ((rawAround[0] + rawAround[1]) / 2),
      live_p99_with_batch: live.p99WithMs / live.p99WithoutMs,
    },
  };
}

export function formatBatch(b: BatchSection): string {
  const r = b.ratios;
  return [
    'Bulk batches (same Embers, after the live points):',
    `  echo  ${b.echo.lines} lines: ${b.echo.itemsPerSec.toFixed(0)} items/s (${b.echo.seconds.toFixed(1)} s running, ${b.echo.endToEndSeconds.toFixed(1)} s end to end); ÷ live echo req/s = ${r.echo_batch_vs_live.toFixed(2)}`,
    `  ocr   ${b.ocr.lines} lines: ${b.ocr.itemsPerSec.toFixed(2)} items/s (${b.ocr.seconds.toFixed(1)} s); ÷ raw pipeline (${b.rawAround[0].toFixed(2)} req/s before it, ${b.rawAround[1].toFixed(2)} after) = ${r.ocr_batch_vs_raw.toFixed(2)} (target ≥ 0.90: ${r.ocr_batch_vs_raw >= 0.9 ? 'PASS' : 'MISS'})`,
    `  live ocr c=1: p50 ${b.live.p50WithoutMs.toFixed(1)} → ${b.live.p50WithMs.toFixed(1)} ms, p99 ${b.live.p99WithoutMs.toFixed(1)} → ${b.live.p99WithMs.toFixed(1)} ms with a batch running (${b.live.requests} answers; ${b.live.batchLinesDuring} batch lines done meanwhile; without it: p99 ${b.live.p99WithoutRunsMs[0].toFixed(1)} before, ${b.live.p99WithoutRunsMs[1].toFixed(1)} after); p99 ×${r.live_p99_with_batch.toFixed(2)} (target ≤ 1.20: ${r.live_p99_with_batch <= 1.2 ? 'PASS' : 'MISS'})`,
    `    slowest 3 with the batch: ${slowList(b.live.slowestWith)}; without: ${slowList(b.live.slowestWithout)}`,
    `  live ocr c=1, ${b.sporadic.thinkMs} ms between requests: p50 ${b.sporadic.p50WithoutMs.toFixed(1)} → ${b.sporadic.p50WithMs.toFixed(1)} ms, p99 ${b.sporadic.p99WithoutMs.toFixed(1)} → ${b.sporadic.p99WithMs.toFixed(1)} ms with a batch running (${b.sporadic.batchLinesDuring} batch lines done meanwhile; the batch runs in the gaps, and a live request that finds a batch inference running shares the cores with it until it ends)`,
  ].join('\n');
}

/** "113.6 ms (infer 98.0, batch 0.1, queue 0.5)", the three slowest: a batch inference beside a live one shows as a longer infer, or as batch wait. */
function slowList(list?: SlowAnswer[]): string {
  if (!list?.length) return 'none recorded';
  const f = (n?: number) => (n === undefined ? '?' : n.toFixed(1));
  return list
    .slice(0, 3)
    .map((a) => `${a.ms.toFixed(1)} ms (infer ${f(a.timing.infer)}, batch ${f(a.timing.batch)}, queue ${f(a.timing.queue)})`)
    .join(', ');
}
