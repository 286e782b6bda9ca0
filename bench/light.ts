// A light model, where a serving platform's own cost shows: PaddleOCR's text-direction
// classifier (about a millisecond of inference per request on these CPUs) on an input its handler
// generates (bench/functions/cls.ts). Three sides take turns at each concurrency: raw (the same
// handler in this process, calling onnxruntime-node directly), Embers (`cls-batched`, deployed
// with `embers deploy`, dynamic batching on) and the plain server (Hono + onnxruntime running the
// same handler, one request at a time, as a user would write it).
import { mkdir, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import type { ModelHandle, Tensor } from 'embers';
import clsBatched from './functions/cls-batched.ts';
import { BATCHED_MAX_BATCH } from './functions/cls.ts';
import { errorsNote, num, table } from './format.ts';
import type { LoadRun, Target } from './load.ts';
import { createSession, handlerContext, MODELS, ort, settingLabel, threadSettings, type ThreadSetting } from './ort.ts';
import { cpuPerRequestUs, meets, TARGETS, type Measured } from './result.ts';
import { batchDelta, deployFunctions, postJson, settledCounters, startEmbers, startNaive, type EmbersServer } from './servers.ts';
import { latency, timedLoop, windowFromEnv, type Window } from './stats.ts';
import { takeTurnsOf } from './turns.ts';

export const LIGHT_CONCURRENCIES = [1, 8, 32, 128];
/** Where the headline ratio is taken. */
export const LIGHT_HEADLINE_CONCURRENCY = 32;
const FUNCTION = 'cls-batched';
const BODY = Buffer.from('{"seed":7}');

export interface LightPoint {
  concurrency: number;
  /** Raw's thread setting: the fastest at this concurrency, probed first. */
  rawSetting: ThreadSetting;
  raw: Measured;
  embers: Measured & { meanBatch?: number };
  plain: Measured;
  /** Embers req/s ÷ raw req/s. */
  embersVsRaw: number;
  /** Embers req/s ÷ the plain server's req/s. */
  embersVsPlain: number;
}

export interface LightSection {
  model: string;
  points: LightPoint[];
  headlineConcurrency: number;
  /** Embers ÷ raw at the headline concurrency, and the lowest over every point. */
  embersVsRaw: number;
  lowestEmbersVsRaw: number;
  seconds: number;
}

/**
 * The handler on a direct session: `concurrency` callers in this process, each calling again when
 * answered. Their inferences asked in the same turn of the event loop run as one (up to 32 rows):
 * the fastest the same code gets from onnxruntime in one process, with nothing between.
 */
function rawSide(setting: ThreadSetting, concurrency: number): (w: Window) => Promise<LoadRun> {
  return async (w) => {
    const session = await createSession(MODELS.cls, setting.threads, setting.spin);
    try {
      const ctx = handlerContext({ cls: turnBatched(session) }, { name: clsBatched.name, version: 'raw' }, 'raw');
      let seed = 0;
      const call = () => Promise.resolve(clsBatched.handler({ seed: seed++ }, ctx));
      // Every caller's loop measures its own requests; the window is shared.
      const loops = await Promise.all(Array.from({ length: concurrency }, () => timedLoop(call, w)));
      const samples = loops.flatMap((l) => l.durations);
      const seconds = Math.max(...loops.map((l) => l.seconds));
      const result = { concurrency, requests: samples.length, errors: 0, seconds, reqPerSec: samples.length / seconds, latencyMs: latency(samples), statuses: {}, warmupSeconds: w.warmupMs / 1000, abandoned: 0 };
      return { result, samples, timings: new Map() };
    } finally {
      await session.release();
    }
  };
}

/** The classifier's handle for raw: single-row calls made in one turn are stacked into one run (at most as many rows as Embers' batches), and each caller gets its row back. */
export function turnBatched(session: ort.InferenceSession): ModelHandle {
  const [input, output] = [session.inputNames[0], session.outputNames[0]];
  const waiting: { data: Float32Array; dims: readonly number[]; resolve: (out: Record<string, Tensor>) => void; reject: (err: unknown) => void }[] = [];
  const flush = async () => {
    const calls = waiting.splice(0, BATCHED_MAX_BATCH);
    if (waiting.length) setImmediate(flush);
    const row = calls[0].data.length;
    const data = new Float32Array(row * calls.length);
    calls.forEach((c, i) => data.set(c.data, i * row));
    try {
      const res = await session.run({ [input]: new ort.Tensor('float32', data, [calls.length, ...calls[0].dims.slice(1)]) });
      const out = res[output].data as Float32Array;
      const width = out.length / calls.length;
      calls.forEach((c, i) => c.resolve({ [output]: { type: 'float32', data: out.slice(i * width, (i + 1) * width), dims: [1, width] } }));
    } catch (err) {
      for (const c of calls) c.reject(err);
    }
  };
  return {
    inputNames: session.inputNames,
    outputNames: session.outputNames,
    run: (feeds) =>
      new Promise((resolve, reject) => {
        if (!waiting.length) setImmediate(flush);
        waiting.push({ data: feeds[input].data as Float32Array, dims: feeds[input].dims, resolve, reject });
      }),
  };
}

/** Raw's fastest thread setting at the given concurrency (a short probe of each). */
async function fastestSetting(concurrency: number): Promise<ThreadSetting> {
  let best: { setting: ThreadSetting; reqPerSec: number } | undefined;
  for (const setting of threadSettings(os.availableParallelism())) {
    const { result } = await rawSide(setting, concurrency)({ warmupMs: 300, measureMs: 1000 });
    if (!best || result.reqPerSec > best.reqPerSec) best = { setting, reqPerSec: result.reqPerSec };
  }
  return best!.setting;
}

export async function lightSection(o: { embers: EmbersServer; plainPort: number; groups: number[]; window: Window; log: (line: string) => void }): Promise<LightSection> {
  const t0 = performance.now();
  const { embers, log } = o;
  log(`light model: deploying ${FUNCTION}`);
  await deployFunctions(embers, ['bench/functions/cls-batched.ts']);
  const auth = { authorization: `Bearer ${embers.apiKey}`, 'content-type': 'application/json' };
  // Waits for the cold start from zero, then answers.
  await postJson(embers.port, `/v1/run/${FUNCTION}`, BODY.toString(), auth, 180_000);
  const served: Target = { port: embers.port, method: 'POST', path: `/v1/run/${FUNCTION}`, headers: auth, body: BODY };
  const plain: Target = { port: o.plainPort, method: 'POST', path: '/cls', headers: { 'content-type': 'application/json' }, body: BODY };
  const points: LightPoint[] = [];
  let before = await settledCounters(embers, FUNCTION);
  for (const concurrency of LIGHT_CONCURRENCIES) {
    const rawSetting = await fastestSetting(concurrency);
    log(`light model c=${concurrency}: raw (${settingLabel(rawSetting)}), Embers, plain, plain, Embers, raw`);
    const [raw, e, p] = await takeTurnsOf(o.groups, o.window, [rawSide(rawSetting, concurrency), served, plain], concurrency);
    const after = await settledCounters(embers, FUNCTION);
    const meanBatch = batchDelta(before, after).cls?.meanBatch;
    before = after;
    points.push({ concurrency, rawSetting, raw, embers: { ...e, meanBatch }, plain: p, embersVsRaw: e.reqPerSec / raw.reqPerSec, embersVsPlain: e.reqPerSec / p.reqPerSec });
    log(`light model c=${concurrency}: raw ${raw.reqPerSec.toFixed(0)}, Embers ${e.reqPerSec.toFixed(0)}, plain ${p.reqPerSec.toFixed(0)} req/s`);
  }
  const headline = points.find((p) => p.concurrency === LIGHT_HEADLINE_CONCURRENCY) ?? points[points.length - 1];
  return {
    model: 'PaddleOCR ch_ppocr_mobile_v2.0_cls, input [1, 3, 48, 192] generated in the handler',
    points,
    headlineConcurrency: headline.concurrency,
    embersVsRaw: headline.embersVsRaw,
    lowestEmbersVsRaw: Math.min(...points.map((p) => p.embersVsRaw)),
    seconds: (performance.now() - t0) / 1000,
  };
}

export function formatLight(s: LightSection): string[] {
  return [
    `Light model: ${s.model}; raw (the handler in one process, the inferences of one turn run as one, the fastest thread setting), Embers (maxBatchSize ${BATCHED_MAX_BATCH}), the plain server (Hono + onnxruntime, one request at a time), taking turns raw, Embers, plain, plain, Embers, raw`,
    table(
      ['conc', 'raw setting', 'raw req/s', 'p50', 'Embers req/s', 'p50', 'p99', 'rows/exec', 'CPU µs/req', 'plain req/s', 'p50', '÷ raw', '÷ plain'],
      s.points.map((p) => [
        String(p.concurrency),
        `${p.rawSetting.threads}${p.rawSetting.spin ? ' spin' : ''}`,
        num(p.raw.reqPerSec, 0),
        num(p.raw.latencyMs.p50, 2),
        num(p.embers.reqPerSec, 0),
        num(p.embers.latencyMs.p50, 2),
        num(p.embers.latencyMs.p99, 2),
        num(p.embers.meanBatch, 2),
        num(cpuPerRequestUs(p.embers), 0),
        num(p.plain.reqPerSec, 0),
        num(p.plain.latencyMs.p50, 2),
        num(p.embersVsRaw, 2),
        num(p.embersVsPlain, 2),
      ]),
    ),
    ...s.points.flatMap((p) => [...errorsNote('Embers', p.embers), ...errorsNote('plain', p.plain)]),
  ];
}

/** The section on an `embers dev` and a plain server of its own (its function needs a replica slot the earlier sections' replicas may hold). */
export async function lightOnFreshEmbers(window: Window, log: (line: string) => void): Promise<LightSection> {
  log('light model: starting embers dev and the plain server');
  const [embers, plain] = await Promise.all([startEmbers({}), startNaive()]);
  try {
    return await lightSection({ embers, plainPort: plain.port, groups: [embers.child.pid!, plain.child.pid], window, log });
  } finally {
    await Promise.all([embers.stop(), plain.stop()]);
  }
}

/** `BENCH_ONLY=light`: the light-model section alone (latest-light.json). */
export async function lightOnly(results: string, log: (line: string) => void, meta: Record<string, unknown>): Promise<LightSection> {
  const light = await lightOnFreshEmbers(windowFromEnv(), log);
  await mkdir(results, { recursive: true });
  await writeFile(path.join(results, 'latest-light.json'), `${JSON.stringify({ ...meta, light }, null, 2)}\n`);
  process.stdout.write(`\n${formatLight(light).join('\n')}\n${lightSummaryLine(light)}\n`);
  return light;
}

/** The summary line: Embers ÷ raw at the headline point and the lowest, against TARGETS. */
export function lightSummaryLine(s: LightSection): string {
  const verdict = meets('light_vs_raw', s.embersVsRaw) && meets('light_vs_raw_lowest', s.lowestEmbersVsRaw) ? 'PASS' : 'MISS';
  return `  light_vs_raw       ${num(s.embersVsRaw, 3).padStart(6)}  target ≥ ${TARGETS.light_vs_raw.value.toFixed(2)} at c=${s.headlineConcurrency}, ≥ ${TARGETS.light_vs_raw_lowest.value.toFixed(2)} at every concurrency (lowest ${num(s.lowestEmbersVsRaw, 2)})  ${verdict}`;
}
