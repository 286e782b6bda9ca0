// Dynamic batching's gain: one model served by two functions that differ only in maxBatchSize
// (32 against 1), deployed with `embers deploy` on an `embers dev` of the section's own
// (bench/run.ts) and taking turns at the same concurrency, as Triton's perf_analyzer examples
// compare dynamic batching on and off. The model is PaddleOCR's text-direction classifier
// (bench/functions/cls.ts), each request's input generated in its handler. The issue's target
// (≥ 4×) is for a GPU: run the bench with BENCH_EXECUTION_PROVIDERS=cuda,cpu there. On CPU the
// figure says what batching buys on CPU.
import { BATCHED_MAX_BATCH } from './functions/cls.ts';
import { closedLoop, type Target } from './load.ts';
import { errorsNote, num, table } from './format.ts';
import { batchingVerdict, onGpu, TARGETS, type BatchingPoint, type BatchingSection } from './result.ts';
import { batchDelta, deployFunctions, postJson, settledCounters, type EmbersServer } from './servers.ts';
import type { Window } from './stats.ts';
import { takeTurns } from './turns.ts';

export const BATCHING_CONCURRENCIES = [8, 32];
/** The point the headline gain is taken at (the concurrency of the other sections' middle points). */
export const BATCHING_HEADLINE_CONCURRENCY = 32;
const FUNCTIONS = { batched: 'cls-batched', single: 'cls-single' } as const;
const FILES = ['bench/functions/cls-batched.ts', 'bench/functions/cls-single.ts'];
const BODY = Buffer.from('{"seed":7}');

export async function batchingSection(o: { embers: EmbersServer; groups: number[]; window: Window; log: (line: string) => void }): Promise<BatchingSection> {
  const t0 = performance.now();
  const { embers, log } = o;
  log(`batching: deploying ${Object.values(FUNCTIONS).join(' and ')}`);
  await deployFunctions(embers, FILES);
  const auth = { authorization: `Bearer ${embers.apiKey}`, 'content-type': 'application/json' };
  // The first call of each waits for its cold start (scale from zero), then answers.
  const answer = (name: string) => postJson(embers.port, `/v1/run/${name}`, BODY.toString(), auth, 180_000) as Promise<ClsAnswer>;
  const outputs = [await answer(FUNCTIONS.batched), await answer(FUNCTIONS.single)];
  const target = (name: string): Target => ({ port: embers.port, method: 'POST', path: `/v1/run/${name}`, headers: auth, body: BODY });
  // Warm both past their first inferences (session warm-up, the batch tuner's first sizes).
  await Promise.all(Object.values(FUNCTIONS).map((name) => closedLoop(target(name), { concurrency: 8, window: { warmupMs: 1000, measureMs: 2000 } })));
  const settled = () => Promise.all([settledCounters(embers, FUNCTIONS.batched), settledCounters(embers, FUNCTIONS.single)]);
  const model = async (name: string) => (await embers.describe(name)).replicas.find((r) => r.models?.cls)?.models?.cls;
  const [mb, ms] = [await model(FUNCTIONS.batched), await model(FUNCTIONS.single)];
  const providers = { batched: mb?.provider ?? 'unknown', single: ms?.provider ?? 'unknown', ...(mb?.fallback || ms?.fallback ? { fallback: mb?.fallback ?? ms?.fallback } : {}) };
  const provider = providers.batched === providers.single ? providers.batched : providers.batched === 'unknown' || providers.single === 'unknown' ? 'unknown' : 'mixed';
  const points: BatchingPoint[] = [];
  let before = await settled();
  for (const concurrency of BATCHING_CONCURRENCIES) {
    log(`batching c=${concurrency}: ${FUNCTIONS.batched}, ${FUNCTIONS.single}, ${FUNCTIONS.single}, ${FUNCTIONS.batched}`);
    const [batched, single] = await takeTurns(o.groups, o.window, target(FUNCTIONS.batched), target(FUNCTIONS.single), concurrency);
    const after = await settled();
    const meanBatch = (i: 0 | 1) => batchDelta(before[i], after[i]).cls?.meanBatch;
    points.push({ concurrency, batched: { ...batched, meanBatch: meanBatch(0) }, single: { ...single, meanBatch: meanBatch(1) }, gain: batched.reqPerSec / single.reqPerSec });
    log(`batching c=${concurrency}: batched ${batched.reqPerSec.toFixed(0)} req/s, single ${single.reqPerSec.toFixed(0)} req/s`);
    before = after;
  }
  const headline = points.find((p) => p.concurrency === BATCHING_HEADLINE_CONCURRENCY) ?? points[points.length - 1];
  return {
    model: 'PaddleOCR ch_ppocr_mobile_v2.0_cls, input [1, 3, 48, 192] per request',
    provider,
    providers,
    maxBatchSize: BATCHED_MAX_BATCH,
    points,
    gain: headline.gain,
    headlineConcurrency: headline.concurrency,
    outputsMatch: sameAnswer(outputs[0], outputs[1]),
    seconds: (performance.now() - t0) / 1000,
  };
}

interface ClsAnswer {
  angle: string;
  score: number;
}

/** Two answers of the classifier agree: the same angle, scores within 1e-4 (two sessions, maybe two GPU kernels, need not agree to the last bit). */
const sameAnswer = (x: ClsAnswer, y: ClsAnswer): boolean => x.angle === y.angle && Math.abs(x.score - y.score) < 1e-4;

/** The summary line: the gain at the headline point, judged only on a GPU with both sides answering everything. */
export function batchingSummaryLine(b: BatchingSection): string {
  const p = b.points.find((x) => x.concurrency === b.headlineConcurrency);
  const verdict = batchingVerdict(b);
  const t = TARGETS.dynamic_batching_gain;
  const why = onGpu(b) ? b.provider : `${b.provider}${b.providers.fallback ? ` (${b.providers.fallback})` : ''}: informative, the target is for a GPU`;
  const at = p ? `; at c=${p.concurrency}: ${num(p.batched.reqPerSec, 0)} ÷ ${num(p.single.reqPerSec, 0)} req/s, ${num(p.batched.meanBatch, 2)} rows per execution` : '';
  return `  dynamic_batching_gain ${num(b.gain, 3).padStart(6)}  target ${t.op === '>=' ? '≥' : '≤'} ${t.value.toFixed(2)} on a GPU  ${verdict === undefined ? '-   ' : verdict ? 'PASS' : 'MISS'}   (${why}; cls model, maxBatchSize ${b.maxBatchSize} ÷ 1${at})`;
}

export function formatBatching(b: BatchingSection): string[] {
  const out = [
    `Dynamic batching: ${b.model}, generated in the handler; maxBatchSize ${b.maxBatchSize} against 1 (batch-1 serving), taking turns batched, single, single, batched; execution provider ${b.provider === 'mixed' ? `batched ${b.providers.batched}, single ${b.providers.single}` : b.provider}${b.providers.fallback ? ` (${b.providers.fallback})` : ''}${b.outputsMatch ? '' : '; ! the two functions answered the same seed differently'}`,
    table(
      ['conc', 'batched req/s', 'p50', 'p99', 'rows/exec', 'single req/s', 'p50', 'p99', 'rows/exec', 'gain'],
      b.points.map((p) => [
        String(p.concurrency),
        num(p.batched.reqPerSec, 0),
        num(p.batched.latencyMs.p50, 2),
        num(p.batched.latencyMs.p99, 2),
        num(p.batched.meanBatch, 2),
        num(p.single.reqPerSec, 0),
        num(p.single.latencyMs.p50, 2),
        num(p.single.latencyMs.p99, 2),
        num(p.single.meanBatch, 2),
        `${num(p.gain, 2)}×`,
      ]),
    ),
    ...b.points.flatMap((p) => [...errorsNote('batched', p.batched), ...errorsNote('single', p.single)]),
  ];
  return out;
}
