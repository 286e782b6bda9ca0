// `npm run bench`: the raw limit, the naive baseline and Embers, on one machine with one model
// and one image, then Embers' cold start from zero; prints the tables and writes
// bench/results/latest.{json,svg}. `BENCH_ONLY=cold` runs only the cold-start section and
// writes bench/results/latest-cold.json; `BENCH_ONLY=batch` runs only the raw pipeline, live
// echo and the bulk-batch section and writes bench/results/latest-batch.json (latest.json is
// left as it is either way). `BENCH_ONLY=fleet` runs only the fleet section (many functions,
// keep-alive policies over a trace, 1,000 at zero), which the full run ends with, and writes
// bench/results/latest-fleet.json and fleet.svg. `BENCH_ONLY=oip`: the Open Inference Protocol
// section alone (latest-oip.json). `BENCH_ONLY=soak`: a few minutes of sustained load, sampling
// Redis memory, RSS and the usage export's lag (latest-soak.json; BENCH_SOAK_SECONDS, 180).
// `BENCH_ONLY=hostile`: a hostile second tenant's cost to its neighbours (latest-hostile.json).
// `BENCH_ONLY=light`: a light model against raw and a plain server (latest-light.json).
// `BENCH_ONLY=floor`: the design's bare path against `echo` and ping (latest-floor.json).
// `BENCH_ONLY=split`: `ocr` against the same pipeline split into functions calling each other, and
// one call hop's cost (latest-split.json).
import { execFileSync } from 'node:child_process';
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import sharp from 'sharp';
import { batchSection, formatBatch } from './batch.ts';
import { batchingSection, batchingSummaryLine, formatBatching } from './batching.ts';
import { formatInferenceProtocol, inferenceProtocolSection, inferenceProtocolSummaryLines, quickRawCls, type InferenceProtocolSection } from './inference-protocol.ts';
import { chartSvg } from './chart.ts';
import { stopAllChildren } from './child.ts';
import { fleetSection } from './fleet-section.ts';
import { soakOnly } from './soak.ts';
import { hostileOnly } from './hostile.ts';
import { formatLight, lightOnFreshEmbers, lightOnly, lightSummaryLine } from './light.ts';
import { floorOnly, floorSection, formatFloor } from './floor.ts';
import { formatSplit, splitOnFreshEmbers, splitOnly, splitSummaryLines } from './split.ts';
import { coldStartSection, coldSummaryLine, formatCold, type ColdStartResult } from './cold.ts';
import { IMAGE_TEXT, ocrText, testImage } from './image.ts';
import { bodySection, formatBodies } from './body.ts';
import { closedLoop, type Target } from './load.ts';
import { takeTurns } from './turns.ts';
import { ORT_VERSION, settingLabel, type ThreadSetting } from './ort.ts';
import { bestCls, machine, RAW_SETTINGS, rawCls, rawPipelineSide, rawPipelines, type ClsPoint } from './raw.ts';
import { formatOverhead, formatReport } from './report.ts';
import { batchingVerdict, computeRatios, cpuPerRequestUs, type BatchingSection, echoVsPingByCpu, type BenchResult, type ColdOnlyResult, type OcrPoint, type OverheadPoint, type SaturationTurns } from './result.ts';
import { ECHO_BODY, ROOT, batchDelta, echoTarget, postJson, settledCounters, startEmbers, startNaive } from './servers.ts';
import { BLOCK, pairedC1 } from './paired.ts';
import { windowFromEnv, type Window } from './stats.ts';

const CONCURRENCIES = [1, 8, 32, 128];
const OVERHEAD_CONCURRENCY = 32;
/** Where `echo` and ping also take turns, to show where each saturates (not targets). */
const SWEEP_CONCURRENCIES = [8, 128, 256];
const RESULTS = path.join(ROOT, 'bench/results');

const log = (line: string) => process.stderr.write(`[bench ${new Date().toISOString().slice(11, 19)}] ${line}\n`);

for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    log(`${signal}: stopping child processes`);
    void stopAllChildren().finally(() => process.exit(130));
  });
}

function gitInfo(): BenchResult['git'] {
  const git = (...args: string[]) => execFileSync('git', ['--no-optional-locks', ...args], { cwd: ROOT, encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
  try {
    return { commit: git('rev-parse', 'HEAD').trim(), dirtyFiles: git('status', '--porcelain').split('\n').filter(Boolean).length };
  } catch {
    return { commit: 'unknown', dirtyFiles: 0 };
  }
}

/** The cold-start section, or why it failed (the rest of the results are kept either way). */
async function coldStart(ocrBody: Buffer): Promise<{ coldStart?: ColdStartResult; coldStartError?: string }> {
  log('cold start: ocr from zero (models in S3, then on disk)');
  try {
    return { coldStart: await coldStartSection(ocrBody, log) };
  } catch (err) {
    const message = err instanceof Error ? err.message : String(err);
    log(`cold start section failed: ${err instanceof Error ? (err.stack ?? message) : message}`);
    process.exitCode = 1;
    return { coldStartError: message };
  }
}

async function mainColdOnly(): Promise<void> {
  const began = performance.now();
  const host = machine();
  const ocrBody = Buffer.from(JSON.stringify({ image: await testImage() }));
  const cold = await coldStartSection(ocrBody, log);
  const result: ColdOnlyResult = {
    date: new Date().toISOString(),
    durationSeconds: (performance.now() - began) / 1000,
    machine: { ...host, ortVersion: ORT_VERSION },
    git: gitInfo(),
    coldStart: cold,
  };
  await mkdir(RESULTS, { recursive: true });
  const file = path.join(RESULTS, 'latest-cold.json');
  await writeFile(file, `${JSON.stringify(result, null, 2)}\n`);
  const m = result.machine;
  process.stdout.write(
    `\nEmbers cold-start benchmark — ${result.date} — ${m.cpuModel}, ${m.cores} cores, node ${m.node}, onnxruntime-node ${m.ortVersion}, ${result.git.commit.slice(0, 7)}${result.git.dirtyFiles ? ` (+${result.git.dirtyFiles} changed files)` : ''}\n` +
      `Load average at start: ${m.loadAvgAtStart.join(', ')} (other work on the machine skews every figure).\n\n${formatCold(cold)}\n\nSummary:\n${coldSummaryLine(cold)}\n`,
  );
  log(`wrote ${path.relative(process.cwd(), file)}`);
}

async function mainBatchOnly(): Promise<void> {
  const began = performance.now();
  const host = machine();
  const window = windowFromEnv();
  const image = await testImage();
  const ocrBody = Buffer.from(JSON.stringify({ image }));
  log(`raw: ocr pipeline in-process, ${RAW_SETTINGS.map(settingLabel).join(', ')}`);
  const [{ output: _output, ...pipeline }] = await rawPipelines(image, window);
  log('starting embers dev');
  const embers = await startEmbers({ ocr: ocrBody.toString(), echo: ECHO_BODY });
  try {
    log(`echo c=${OVERHEAD_CONCURRENCY}`);
    const echo = await closedLoop(
      echoTarget(embers),
      { concurrency: OVERHEAD_CONCURRENCY, window },
    );
    const batches = await batchSection({ port: embers.port, apiKey: embers.apiKey, ocrBody, window, echoLiveReqPerSec: echo.reqPerSec, rawOcrReqPerSec: pipeline.reqPerSec, raw: rawPipelineSide(image, pipeline), log });
    const result = { date: new Date().toISOString(), durationSeconds: (performance.now() - began) / 1000, machine: { ...host, ortVersion: ORT_VERSION }, git: gitInfo(), window, rawPipeline: pipeline, echoLive: echo, batches };
    await mkdir(RESULTS, { recursive: true });
    await writeFile(path.join(RESULTS, 'latest-batch.json'), `${JSON.stringify(result, null, 2)}\n`);
    process.stdout.write(`\nraw ocr pipeline ${pipeline.reqPerSec.toFixed(2)} req/s; live echo c=${OVERHEAD_CONCURRENCY} ${echo.reqPerSec.toFixed(0)} req/s\n${formatBatch(batches)}\n`);
  } finally {
    await embers.stop();
  }
}

/** `BENCH_ONLY=body`: the request-body section alone (a photo to ocr as base64 JSON and as the file). */
async function mainBodyOnly(): Promise<void> {
  const began = performance.now();
  const window = windowFromEnv();
  log('starting embers dev');
  const embers = await startEmbers({ ocr: JSON.stringify({ image: await testImage() }) });
  try {
    const bodies = await bodySection({ port: embers.port, apiKey: embers.apiKey, groups: [embers.child.pid!], seconds: Math.max(20, (4 * window.measureMs) / 1000), log });
    const result = { date: new Date().toISOString(), durationSeconds: (performance.now() - began) / 1000, machine: { ...machine(), ortVersion: ORT_VERSION }, git: gitInfo(), bodies };
    await mkdir(RESULTS, { recursive: true });
    await writeFile(path.join(RESULTS, 'latest-body.json'), `${JSON.stringify(result, null, 2)}\n`);
    process.stdout.write(`\n${formatBodies(bodies)}\n`);
  } finally {
    await embers.stop();
  }
}

/**
 * `echo` against the naive server's ping, taking turns, at OVERHEAD_CONCURRENCY (the target's
 * point) and at SWEEP_CONCURRENCIES: ping saturates at the lowest (its load generator at one
 * core), `echo` only with many requests in flight through its four processes.
 */
async function overheadSection(embers: { port: number; apiKey: string }, pingPort: number, groups: number[], window: Window): Promise<BenchResult['overhead']> {
  const pingTarget: Target = { port: pingPort, method: 'GET', path: '/ping' };
  log(`overhead c=${OVERHEAD_CONCURRENCY}: echo, ping, ping, echo`);
  const [echo, ping] = await takeTurns(groups, window, echoTarget(embers), pingTarget, OVERHEAD_CONCURRENCY);
  const sweep: OverheadPoint[] = [];
  for (const concurrency of [...new Set([...SWEEP_CONCURRENCIES, OVERHEAD_CONCURRENCY])].sort((x, y) => x - y)) {
    const [e, p] = concurrency === OVERHEAD_CONCURRENCY ? [echo, ping] : await takeTurns(groups, window, echoTarget(embers), pingTarget, concurrency);
    sweep.push({ concurrency, echoReqPerSec: e.reqPerSec, pingReqPerSec: p.reqPerSec, echoVsPing: e.reqPerSec / p.reqPerSec, echoP50Ms: e.latencyMs.p50, pingP50Ms: p.latencyMs.p50, echoCores: e.cores, pingCores: p.cores });
    log(`overhead c=${concurrency}: echo ${e.reqPerSec.toFixed(0)} req/s, ping ${p.reqPerSec.toFixed(0)} req/s`);
  }
  const bestEchoVsBestPing = Math.max(...sweep.map((x) => x.echoReqPerSec)) / Math.max(...sweep.map((x) => x.pingReqPerSec));
  return { concurrency: OVERHEAD_CONCURRENCY, echo, ping, sweep, bestEchoVsBestPing };
}

/**
 * Raw's pipeline and Embers at the concurrency where its sweep peaked, taking turns raw, Embers,
 * Embers, raw: the saturation ratio from runs seconds apart rather than from the sweep's best
 * against raw measured minutes earlier (raw's fastest setting ran 21.5 and 32.7 req/s in two runs
 * on one machine here, one thread ~20 in both).
 */
async function saturationSection(image: string, setting: ThreadSetting, embersOcr: Target, ocr: OcrPoint[], groups: number[], window: Window): Promise<SaturationTurns> {
  const peak = ocr.reduce((a, b) => (b.embers.reqPerSec > a.embers.reqPerSec ? b : a));
  log(`ocr saturation: raw (${settingLabel(setting)}), Embers c=${peak.concurrency}, Embers, raw`);
  const [raw, embers] = await takeTurns(groups, window, rawPipelineSide(image, setting), embersOcr, peak.concurrency);
  log(`ocr saturation: raw ${raw.reqPerSec.toFixed(2)} req/s, Embers ${embers.reqPerSec.toFixed(2)} req/s`);
  return { concurrency: peak.concurrency, setting: { threads: setting.threads, ...(setting.spin ? { spin: true } : {}) }, raw, embers, ratio: embers.reqPerSec / raw.reqPerSec };
}

/** `BENCH_ONLY=overhead`: the `echo` against ping section alone. */
async function mainOverheadOnly(): Promise<void> {
  const began = performance.now();
  const window = windowFromEnv();
  log('starting the naive server and embers dev');
  const naive = await startNaive();
  const embers = await startEmbers({ echo: ECHO_BODY });
  try {
    const overhead = await overheadSection(embers, naive.port, [naive.child.pid, embers.child.pid], window);
    const { echo, ping } = overhead;
    const ratios = { echo_vs_ping: echo.reqPerSec / ping.reqPerSec, cpu_us_per_echo: cpuPerRequestUs(echo), ...echoVsPingByCpu(echo, ping) };
    const result = { date: new Date().toISOString(), durationSeconds: (performance.now() - began) / 1000, machine: { ...machine(), ortVersion: ORT_VERSION }, git: gitInfo(), window, overhead, ratios };
    await mkdir(RESULTS, { recursive: true });
    await writeFile(path.join(RESULTS, 'latest-overhead.json'), `${JSON.stringify(result, null, 2)}\n`);
    process.stdout.write(`\n${formatOverhead(overhead).join('\n')}\n`);
  } finally {
    await Promise.all([naive.stop(), embers.stop()]);
  }
}

/**
 * The dynamic batching section on an `embers dev` of its own: its two functions need replica
 * slots, which the earlier sections' replicas may hold on a small machine.
 */
async function batchingOnFreshEmbers(window: Window): Promise<BatchingSection> {
  log('batching: starting embers dev');
  const embers = await startEmbers({});
  try {
    return await batchingSection({ embers, groups: [embers.child.pid!], window, log });
  } finally {
    await embers.stop();
  }
}

/** The Open Inference Protocol section on an `embers dev` of its own, against `rawCls` (this run's raw cls points). */
async function oipOnFreshEmbers(window: Window, rawCls: ClsPoint[]): Promise<InferenceProtocolSection> {
  log('oip: starting embers dev');
  const embers = await startEmbers({});
  try {
    return await inferenceProtocolSection({ embers, rawCls, window, log });
  } finally {
    await embers.stop();
  }
}

/** `BENCH_ONLY=oip`: the Open Inference Protocol against raw onnxruntime-node, alone. */
async function mainOipOnly(): Promise<void> {
  const began = performance.now();
  const window = windowFromEnv();
  log('raw: cls model alone, short sweep');
  const oip = await oipOnFreshEmbers(window, await quickRawCls(window));
  const result = { date: new Date().toISOString(), durationSeconds: (performance.now() - began) / 1000, machine: { ...machine(), ortVersion: ORT_VERSION }, git: gitInfo(), window, oip };
  await mkdir(RESULTS, { recursive: true });
  await writeFile(path.join(RESULTS, 'latest-oip.json'), `${JSON.stringify(result, null, 2)}\n`);
  process.stdout.write(`\n${formatInferenceProtocol(oip).join('\n')}\n\n${inferenceProtocolSummaryLines(oip).join('\n')}\n`);
}

/** `BENCH_ONLY=batching`: dynamic batching on and off, the same model, alone. */
async function mainBatchingOnly(): Promise<void> {
  const began = performance.now();
  const window = windowFromEnv();
  const batching = await batchingOnFreshEmbers(window);
  const verdict = batchingVerdict(batching);
  const result = {
    date: new Date().toISOString(),
    durationSeconds: (performance.now() - began) / 1000,
    machine: { ...machine(), ortVersion: ORT_VERSION },
    git: gitInfo(),
    window,
    batching,
    ratios: { dynamic_batching_gain: batching.gain },
    pass: verdict === undefined ? {} : { dynamic_batching_gain: verdict },
  };
  await mkdir(RESULTS, { recursive: true });
  await writeFile(path.join(RESULTS, 'latest-batching.json'), `${JSON.stringify(result, null, 2)}\n`);
  process.stdout.write(`\n${formatBatching(batching).join('\n')}\n\n${batchingSummaryLine(batching)}\n`);
}

/** One section of the full run: a failure is logged and kept in the result, and the run goes on (exit code 1). */
async function attempt<T>(section: string, run: () => Promise<T>): Promise<[T, undefined] | [undefined, string]> {
  try {
    return [await run(), undefined];
  } catch (err) {
    const error = err instanceof Error ? err.message : String(err);
    log(`${section} section failed: ${error}`);
    process.exitCode = 1;
    return [undefined, error];
  }
}

async function main(): Promise<void> {
  const only = process.env.BENCH_ONLY ?? '';
  if (only === 'cold') return mainColdOnly();
  if (only === 'batch') return mainBatchOnly();
  if (only === 'body') return mainBodyOnly();
  if (only === 'overhead') return mainOverheadOnly();
  if (only === 'batching') return mainBatchingOnly();
  if (only === 'oip') return mainOipOnly();
  if (only === 'fleet') return void (await fleetSection(RESULTS, log, { date: new Date().toISOString(), machine: machine(), git: gitInfo() }));
  if (only === 'soak') return void (await soakOnly(RESULTS, log, { date: new Date().toISOString(), machine: machine(), git: gitInfo() }));
  if (only === 'hostile') return void (await hostileOnly(RESULTS, log, { date: new Date().toISOString(), machine: machine(), git: gitInfo() }));
  if (only === 'light') return void (await lightOnly(RESULTS, log, { date: new Date().toISOString(), machine: machine(), git: gitInfo() }));
  if (only === 'floor') return void (await floorOnly(RESULTS, log, { date: new Date().toISOString(), machine: machine(), git: gitInfo() }));
  if (only === 'split') return void (await splitOnly(RESULTS, log, { date: new Date().toISOString(), machine: machine(), git: gitInfo() }));
  if (only !== '') throw new Error(`BENCH_ONLY must be "cold", "batch", "body", "overhead", "batching", "light", "floor", "split", "oip", "fleet", "soak", "hostile" or unset, got "${only}"`);
  const began = performance.now();
  const host = machine();
  const window = windowFromEnv();
  const image = await testImage();
  const meta = await sharp(Buffer.from(image, 'base64')).metadata();
  const ocrBody = Buffer.from(JSON.stringify({ image }));

  log('raw: cls model alone');
  const cls = await rawCls(window);
  log(`raw: ocr pipeline in-process, ${RAW_SETTINGS.map(settingLabel).join(', ')}`);
  const [{ output: rawOutput, ...pipeline }, ...otherPipelines] = await rawPipelines(image, window);

  log('starting the naive server and embers dev');
  const naive = await startNaive();
  log(`naive server: onnxruntime's default session options gave ${naive.intraOpThreads ?? 'an uncounted number of'} intra-op thread(s) per session`);
  const embers = await startEmbers({ ocr: ocrBody.toString(), echo: ECHO_BODY });
  const auth = { authorization: `Bearer ${embers.apiKey}` };
  const outputs = {
    raw: ocrText(rawOutput),
    embers: ocrText(await postJson(embers.port, '/v1/run/ocr', ocrBody.toString(), auth)),
    naive: ocrText(await postJson(naive.port, '/ocr', ocrBody.toString())),
  };

  const groups = [naive.child.pid, embers.child.pid];
  const measurePair = (a: Target, b: Target, concurrency: number) => takeTurns(groups, window, a, b, concurrency);

  const embersOcr: Target = { port: embers.port, method: 'POST', path: '/v1/run/ocr', headers: { ...auth, 'content-type': 'application/json' }, body: ocrBody };
  const naiveOcr: Target = { port: naive.port, method: 'POST', path: '/ocr', headers: { 'content-type': 'application/json' }, body: ocrBody };

  log(`ocr c=1: raw in-process, Embers and a plain HTTP server with raw's session settings (${settingLabel(pipeline)}) taking turns, blocks of ${BLOCK} requests`);
  const plain = await startNaive({ setting: pipeline });
  let paired;
  try {
    const plainOcr: Target = { ...naiveOcr, port: plain.port };
    paired = await pairedC1(image, embersOcr, window, pipeline, plainOcr);
  } finally {
    await plain.stop();
  }

  const ocr: OcrPoint[] = [];
  let before = await settledCounters(embers, 'ocr');
  for (const concurrency of CONCURRENCIES) {
    log(`ocr c=${concurrency}: Embers, naive, naive, Embers`);
    const [e, n] = await measurePair(embersOcr, naiveOcr, concurrency);
    const after = await settledCounters(embers, 'ocr');
    log(`ocr c=${concurrency}: Embers ${e.reqPerSec.toFixed(2)} req/s, naive ${n.reqPerSec.toFixed(2)} req/s`);
    ocr.push({ concurrency, embers: { ...e, batch: batchDelta(before, after), replicas: Object.keys(after).length }, naive: n, ratio: e.reqPerSec / n.reqPerSec });
    before = after;
  }

  const saturation = await saturationSection(image, pipeline, embersOcr, ocr, groups, window);

  const overhead = await overheadSection(embers, naive.port, groups, window);
  const { echo, ping } = overhead;

  const [bodies, bodiesError] = await attempt('request body', () => bodySection({ port: embers.port, apiKey: embers.apiKey, groups, seconds: Math.max(20, (4 * window.measureMs) / 1000), log }));
  const [batches, batchesError] = await attempt('batch', () =>
    batchSection({ port: embers.port, apiKey: embers.apiKey, ocrBody, window, echoLiveReqPerSec: echo.reqPerSec, rawOcrReqPerSec: pipeline.reqPerSec, raw: rawPipelineSide(image, pipeline), log }),
  );

  log('stopping servers');
  await Promise.all([naive.stop(), embers.stop()]);

  const cold = await coldStart(ocrBody);

  const [batching, batchingError] = await attempt('dynamic batching', () => batchingOnFreshEmbers(window));
  const [light, lightError] = await attempt('light model', () => lightOnFreshEmbers(window, log));
  const [floor, floorError] = await attempt('floor', () => floorSection(window, log));
  const [split, splitError] = await attempt('split', () => splitOnFreshEmbers(window, log));
  const [oip, oipError] = await attempt('open inference protocol', () => oipOnFreshEmbers(window, cls));

  const { ratios, pass } = computeRatios(ocr, pipeline, saturation, paired, echo, ping, batching, light);
  const result: BenchResult = {
    date: new Date().toISOString(),
    durationSeconds: (performance.now() - began) / 1000,
    machine: { ...host, ortVersion: ORT_VERSION },
    git: gitInfo(),
    window: { warmupSeconds: window.warmupMs / 1000, measureSeconds: window.measureMs / 1000 },
    image: { width: meta.width ?? 0, height: meta.height ?? 0, base64Bytes: image.length, text: IMAGE_TEXT },
    raw: { cls, clsBest: bestCls(cls), pipeline, otherPipelines: otherPipelines.map(({ output: _o, ...p }) => p) },
    embersStartupSeconds: embers.startupSeconds,
    naive: { intraOpThreads: naive.intraOpThreads ?? null },
    outputs: { ...outputs, match: outputs.raw === outputs.embers && outputs.raw === outputs.naive },
    ocr,
    saturation,
    pairedC1: paired,
    overhead,
    ratios,
    pass,
    ...cold,
    ...(bodies ? { bodies } : { bodiesError }),
    ...(batches ? { batches } : { batchesError }),
    ...(batching ? { batching } : { batchingError }),
    ...(light ? { light } : { lightError }),
    ...(floor ? { floor } : { floorError }),
    ...(split ? { split } : { splitError }),
    ...(oip ? { oip } : { oipError }),
  };
  await mkdir(RESULTS, { recursive: true });
  await writeFile(path.join(RESULTS, 'latest.json'), `${JSON.stringify(result, null, 2)}\n`);
  await writeFile(path.join(RESULTS, 'latest.svg'), chartSvg(result));
  process.stdout.write(
    `\n${formatReport(result)}\n${batching ? `\n${formatBatching(batching).join('\n')}\n` : ''}${light ? `\n${formatLight(light).join('\n')}\n${lightSummaryLine(light)}\n` : ''}${floor ? `\n${formatFloor(floor).join('\n')}\n` : ''}${split ? `\n${formatSplit(split).join('\n')}\n${splitSummaryLines(split).join('\n')}\n` : ''}${bodies ? `\n${formatBodies(bodies)}\n` : ''}${batches ? `\n${formatBatch(batches)}\n` : ''}${oip ? `\n${formatInferenceProtocol(oip).join('\n')}\n${inferenceProtocolSummaryLines(oip).join('\n')}\n` : ''}`,
  );
  log(`wrote ${path.relative(process.cwd(), path.join(RESULTS, 'latest.json'))} and latest.svg`);
  try {
    await fleetSection(RESULTS, log, { date: new Date().toISOString(), machine: host, git: result.git });
  } catch (err) {
    log(`fleet section failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}`);
    process.exitCode = 1;
  }
}

try {
  await main();
} catch (err) {
  log(`failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}`);
  process.exitCode = 1;
} finally {
  await stopAllChildren();
}
