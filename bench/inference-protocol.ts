// The Open Inference Protocol against raw onnxruntime-node: the cls model deployed bare
// (`embers deploy cls.onnx`), called with binary tensors by many clients at once, taking turns
// with the model run in this process at its best thread setting and batch size; then the
// same calls with JSON tensors, for what JSON costs against binary; and `echo` at the same
// concurrency, whose cost per request every call pays too: no call can cost less than an echo
// plus one row of raw inference, which bounds the ratio to raw from above (`ceiling`).
import { createSession, MODELS, ort, settingLabel, type ThreadSetting } from './ort.ts';
import { bestCls, CLS_BATCHES, RAW_SETTINGS, type ClsPoint } from './raw.ts';
import { errorsNote, num, table } from './format.ts';
import type { LoadRun, Target } from './load.ts';
import type { Measured } from './result.ts';
import { deployFunctions, ECHO_BODY, echoTarget, postJson, type EmbersServer } from './servers.ts';
import { latency, timedLoop, type Window } from './stats.ts';
import { takeTurns } from './turns.ts';

const SHAPE = [1, 3, 48, 192];
const ROWS = 3 * 48 * 192;
export const OIP_CONCURRENCY = 64;
/** Binary infer ÷ raw rows/s to reach (the ceiling, 1 ÷ (1/echo + 1/raw), is printed beside it). */
export const OIP_TARGET = 0.45;
const MAX_BATCH = 32;

export interface InferenceProtocolSection {
  model: string;
  concurrency: number;
  maxBatchSize: number;
  /** The raw side's setting: the best of the raw cls points measured in this run. */
  raw: Measured & { setting: ThreadSetting & { batch: number } };
  binary: Measured;
  json: Measured;
  /** Binary OIP rows/s ÷ raw rows/s. */
  ratio: number;
  /** JSON ÷ binary req/s at the same concurrency. */
  jsonVsBinary: number;
  /** `echo` through /v1/run at the same concurrency: the platform's cost of a request with nothing in it. */
  echo: Measured;
  /** The most rows/s a call costing an echo plus a raw row could reach: 1 ÷ (1/echo + 1/raw); and it ÷ raw. */
  ceiling: { rowsPerSec: number; ratio: number };
  requestBytes: { binary: number; json: number };
}

/** The raw cls model in a tight loop at `setting` and `batch`: one side of the turns, counting rows as requests. */
function rawClsSide(setting: ThreadSetting, batch: number): (w: Window) => Promise<LoadRun> {
  return async (w) => {
    const session = await createSession(MODELS.cls, setting.threads, setting.spin);
    try {
      const data = Float32Array.from({ length: batch * ROWS }, (_, i) => Math.sin(i / 7));
      const feeds = { [session.inputNames[0]]: new ort.Tensor('float32', data, [batch, 3, 48, 192]) };
      const t0 = performance.now();
      const { durations, seconds } = await timedLoop(() => session.run(feeds), w);
      const rows = durations.length * batch;
      const result = { concurrency: 1, requests: rows, errors: 0, seconds, reqPerSec: rows / seconds, latencyMs: latency(durations), statuses: {}, warmupSeconds: (performance.now() - t0) / 1000 - seconds, abandoned: 0 };
      return { result, samples: durations, timings: new Map() };
    } finally {
      await session.release();
    }
  };
}

export async function inferenceProtocolSection(o: { embers: EmbersServer; rawCls: ClsPoint[]; window: Window; log: (line: string) => void }): Promise<InferenceProtocolSection> {
  const { embers, log } = o;
  log(`oip: deploying the cls model bare (maxBatchSize ${MAX_BATCH})`);
  await deployFunctions(embers, [MODELS.cls, '--name', 'cls', '--max-batch', String(MAX_BATCH), '--max-delay-ms', '4']);
  await deployFunctions(embers, ['functions/echo.ts']);
  const input = Float32Array.from({ length: ROWS }, (_, i) => Math.sin(i / 7));
  const header = Buffer.from(JSON.stringify({ inputs: [{ name: 'x', shape: SHAPE, datatype: 'FP32', parameters: { binary_data_size: input.byteLength } }], outputs: [{ name: 'softmax_0.tmp_0', parameters: { binary_data: true } }] }));
  const binaryBody = Buffer.concat([header, Buffer.from(input.buffer)]);
  const jsonBody = Buffer.from(JSON.stringify({ inputs: [{ name: 'x', shape: SHAPE, datatype: 'FP32', data: Array.from(input) }] }));
  const auth = { authorization: `Bearer ${embers.apiKey}` };
  const binary: Target = { port: embers.port, method: 'POST', path: '/v2/models/cls/infer', headers: { ...auth, 'content-type': 'application/octet-stream', 'inference-header-content-length': String(header.length) }, body: binaryBody };
  const json: Target = { port: embers.port, method: 'POST', path: '/v2/models/cls/infer', headers: { ...auth, 'content-type': 'application/json' }, body: jsonBody };
  // The first call waits for the cold start.
  await postJson(embers.port, '/v2/models/cls/infer', jsonBody.toString(), auth, 180_000);
  await postJson(embers.port, '/v1/run/echo', ECHO_BODY, auth, 180_000);
  const echo = echoTarget(embers);
  const best = bestCls(o.rawCls);
  const setting = { threads: best.threads, ...(best.spin ? { spin: true } : {}) };
  const groups = [embers.child.pid!];
  log(`oip c=${OIP_CONCURRENCY}: raw cls (${settingLabel(setting)}, batch ${best.batch}), Embers binary, Embers binary, raw`);
  const [raw, bin] = await takeTurns(groups, o.window, rawClsSide(setting, best.batch), binary, OIP_CONCURRENCY);
  log(`oip: raw ${raw.reqPerSec.toFixed(0)} rows/s, binary ${bin.reqPerSec.toFixed(0)} req/s; JSON against binary`);
  const [js, bin2] = await takeTurns(groups, o.window, json, binary, OIP_CONCURRENCY);
  log(`oip: JSON ${js.reqPerSec.toFixed(0)} req/s, binary ${bin2.reqPerSec.toFixed(0)} req/s; echo against binary`);
  const [ech] = await takeTurns(groups, o.window, echo, binary, OIP_CONCURRENCY);
  const ceiling = 1 / (1 / ech.reqPerSec + 1 / raw.reqPerSec);
  log(`oip: echo ${ech.reqPerSec.toFixed(0)} req/s: a ceiling of ${ceiling.toFixed(0)} rows/s`);
  return {
    model: 'PaddleOCR ch_ppocr_mobile_v2.0_cls deployed bare, input [1, 3, 48, 192] FP32 per request',
    concurrency: OIP_CONCURRENCY,
    maxBatchSize: MAX_BATCH,
    raw: { ...raw, setting: { ...setting, batch: best.batch } },
    binary: bin,
    json: js,
    ratio: bin.reqPerSec / raw.reqPerSec,
    jsonVsBinary: js.reqPerSec / bin2.reqPerSec,
    echo: ech,
    ceiling: { rowsPerSec: ceiling, ratio: ceiling / raw.reqPerSec },
    requestBytes: { binary: binaryBody.length, json: jsonBody.length },
  };
}

/** The raw cls points of a run that measured none (`BENCH_ONLY=oip`): a short sweep. */
export async function quickRawCls(w: Window): Promise<ClsPoint[]> {
  const points: ClsPoint[] = [];
  for (const s of RAW_SETTINGS) {
    for (const batch of CLS_BATCHES) {
      const { result } = await rawClsSide(s, batch)({ warmupMs: Math.min(w.warmupMs, 1000), measureMs: Math.min(w.measureMs, 2000) });
      points.push({ batch, threads: s.threads, ...(s.spin ? { spin: true } : {}), itemsPerSec: result.reqPerSec, p50BatchMs: result.latencyMs.p50 });
    }
  }
  return points;
}

export function formatInferenceProtocol(s: InferenceProtocolSection): string[] {
  const row = (what: string, m: Measured) => [what, num(m.reqPerSec, 0), num(m.latencyMs.p50, 2), num(m.latencyMs.p99, 2)];
  return [
    `Open Inference Protocol: ${s.model}; maxBatchSize ${s.maxBatchSize}, c=${s.concurrency}; raw: onnxruntime-node in-process, ${settingLabel(s.raw.setting)}, batch ${s.raw.setting.batch} (rows/s, latency per batch)`,
    table(['side', 'rows/s', 'p50 ms', 'p99 ms'], [row('raw onnxruntime-node', s.raw), row(`OIP binary (${num(s.requestBytes.binary / 1024, 0)} KiB)`, s.binary), row(`OIP JSON (${num(s.requestBytes.json / 1024, 0)} KiB)`, s.json), row('echo, /v1/run (req/s)', s.echo)]),
    `ceiling: a call costs at least an echo and a raw row: 1 ÷ (1/${num(s.echo.reqPerSec, 0)} + 1/${num(s.raw.reqPerSec, 0)}) = ${num(s.ceiling.rowsPerSec, 0)} rows/s, ${num(s.ceiling.ratio, 2)} of raw`,
    ...errorsNote('binary', s.binary),
    ...errorsNote('json', s.json),
  ];
}

export function inferenceProtocolSummaryLines(s: InferenceProtocolSection): string[] {
  return [
    `  oip_binary_vs_raw     ${num(s.ratio, 3).padStart(6)}  target ≥ 0.45  ${s.ratio >= OIP_TARGET ? 'PASS' : 'MISS'}   (cls bare at c=${s.concurrency}: ${num(s.binary.reqPerSec, 0)} ÷ ${num(s.raw.reqPerSec, 0)} rows/s; ceiling ${num(s.ceiling.ratio, 2)}, reached ${num(s.binary.reqPerSec / s.ceiling.rowsPerSec, 2)})`,
    `  oip_json_vs_binary    ${num(s.jsonVsBinary, 3).padStart(6)}  (informative: JSON tensors ÷ binary, req/s)`,
  ];
}
