// The shape of one benchmark run (what bench/results/latest.json holds) and its verdicts.
import type { InferenceProtocolSection } from './inference-protocol.ts';
import type { BatchSection } from './batch.ts';
import type { BodySection } from './body.ts';
import type { ColdStartResult } from './cold.ts';
import type { PairedC1 } from './paired.ts';
import type { LoadResult } from './load.ts';
import type { ThreadSetting } from './ort.ts';
import type { ClsPoint, RawPipeline } from './raw.ts';
import type { BatchDelta } from './servers.ts';
import type { LightSection } from './light.ts';
import type { FloorSection } from './floor.ts';
import type { SplitSection } from './split.ts';

/** A load point with the CPU each part used meanwhile (cores busy, warm-up and drain included). */
export interface Measured extends LoadResult {
  cores: Record<string, number>;
  /** When pooled from several runs (Embers and naive taking turns): each run's req/s, in order. */
  runsReqPerSec?: number[];
}

/** The batching section (bench/batching.ts): the same model with dynamic batching on and off. */
export interface BatchingSide extends Measured {
  /** Model rows per execution over the point (Δinferences ÷ Δexecutions, from the replicas' counters). */
  meanBatch?: number;
}

export interface BatchingPoint {
  concurrency: number;
  batched: BatchingSide;
  single: BatchingSide;
  /** batched req/s ÷ single req/s. */
  gain: number;
}

export interface BatchingSection {
  model: string;
  /** The execution provider both functions' replicas reported for the model ('mixed' when they differ, 'unknown' when one did not say). */
  provider: string;
  /** Each function's provider, and why it is not the one asked for (a CUDA that failed to load), if so. */
  providers: { batched: string; single: string; fallback?: string };
  maxBatchSize: number;
  points: BatchingPoint[];
  /** The gain at `headlineConcurrency`. */
  gain: number;
  headlineConcurrency: number;
  /** Both functions gave the same answer for the same seed (the same angle, scores within 1e-4). */
  outputsMatch: boolean;
  seconds: number;
}

export interface OverheadPoint {
  concurrency: number;
  echoReqPerSec: number;
  pingReqPerSec: number;
  echoVsPing: number;
  echoP50Ms: number;
  pingP50Ms: number;
  /** Cores busy by role during each side's turns. */
  echoCores: Record<string, number>;
  pingCores: Record<string, number>;
}

export interface EmbersOcrPoint extends Measured {
  /** Per model, summed over the ready replicas, from the batching counters. */
  batch: Record<string, BatchDelta>;
  /** Ready replicas of ocr a heartbeat after the point ended. */
  replicas: number;
}

export interface OcrPoint {
  concurrency: number;
  embers: EmbersOcrPoint;
  naive: Measured;
  /** Embers req/s ÷ naive req/s. */
  ratio: number;
}

/**
 * Embers at saturation against the raw limit, taking turns: raw's pipeline (its fastest setting,
 * in the bench's process) and Embers at the concurrency where its sweep peaked, in the order raw,
 * Embers, Embers, raw.
 */
export interface SaturationTurns {
  /** Embers' concurrency: the sweep's best. */
  concurrency: number;
  setting: ThreadSetting;
  /** Raw's turns (its CPU counted as the load generator's: it runs in the bench's process). */
  raw: Measured;
  embers: Measured;
  /** embers.reqPerSec ÷ raw.reqPerSec. */
  ratio: number;
}

export interface Ratios {
  /** Embers ocr req/s at saturation ÷ raw pipeline req/s, the two taking turns (SaturationTurns). */
  embers_vs_raw: number;
  /**
   * The sweep's best Embers req/s ÷ raw's req/s measured at the start of the run (no target): the
   * figure before the turns, minutes apart, so the machine's drift between them is in it.
   */
  embers_vs_raw_sweep?: number;
  /** Per concurrency ("c1", "c8", …): Embers ocr req/s ÷ naive ocr req/s. */
  embers_vs_naive: Record<string, number>;
  /** Embers ocr p50 at concurrency 1 − raw pipeline p50, ms, the two taking turns in short blocks (bench/paired.ts). */
  added_p50_ms_at_c1: number;
  /** The same for a plain Hono server running the handler on raw's session settings (no target: the floor over HTTP). */
  plain_http_added_p50_ms_at_c1?: number;
  /** The plain server's client mean − handler mean at c = 1, ms: HTTP alone (no target). */
  plain_http_outside_handler_ms_at_c1?: number;
  /** Embers' client mean − handler mean at c = 1, less the plain server's, ms: what the queue path adds over answering over HTTP (no target). */
  embers_outside_handler_over_plain_http_ms_at_c1?: number;
  /** Embers echo req/s ÷ naive GET /ping req/s at the same concurrency. */
  echo_vs_ping: number;
  /**
   * Ping's CPU per request ÷ echo's (every process measured, load generator included): what
   * echo ÷ ping would be if both sides kept the machine equally busy (no target).
   */
  echo_vs_ping_by_cpu?: number;
  /** The cls model served with dynamic batching ÷ served one request per inference, req/s at the same concurrency (bench/batching.ts); its target is for a GPU. */
  dynamic_batching_gain?: number;
  /** CPU µs per `echo` at the overhead point, every process counted (load generator included). */
  cpu_us_per_echo?: number;
  /** The light model (bench/light.ts): Embers req/s ÷ raw's at c = 32, and the lowest over its concurrencies (≥ 0.70). */
  light_vs_raw?: number;
  light_vs_raw_lowest?: number;
}

export const TARGETS = {
  embers_vs_raw: { op: '>=', value: 0.9 },
  embers_vs_naive: { op: '>=', value: 1.0 },
  added_p50_ms_at_c1: { op: '<=', value: 1.0 },
  echo_vs_ping: { op: '>=', value: 0.3 },
  cpu_us_per_echo: { op: '<=', value: 200 },
  light_vs_raw: { op: '>=', value: 0.8 },
  light_vs_raw_lowest: { op: '>=', value: 0.7 },
  /** On a GPU (CUDA execution provider); on CPU the gain is printed, not judged. */
  dynamic_batching_gain: { op: '>=', value: 4 },
} as const;

export function meets(name: keyof typeof TARGETS, value: number): boolean {
  const t = TARGETS[name];
  return t.op === '>=' ? value >= t.value : value <= t.value;
}

export interface BenchResult {
  oip?: InferenceProtocolSection;
  oipError?: string;
  date: string;
  durationSeconds: number;
  machine: { cpuModel: string; cores: number; totalMemGiB: number; node: string; platform: string; ortVersion: string; loadAvgAtStart: number[] };
  git: { commit: string; dirtyFiles: number };
  window: { warmupSeconds: number; measureSeconds: number };
  image: { width: number; height: number; base64Bytes: number; text: string };
  /** pipeline: the fastest thread setting; otherPipelines: the others. */
  raw: { cls: ClsPoint[]; clsBest: ClsPoint; pipeline: Omit<RawPipeline, 'output'>; otherPipelines?: Omit<RawPipeline, 'output'>[] };
  embersStartupSeconds: number;
  /** What onnxruntime's default session options gave the naive server (null: not counted). */
  naive?: { intraOpThreads: number | null };
  /** Recognised text of the test image from each path: they should agree. */
  outputs: { raw: string; embers: string; naive: string; match: boolean };
  ocr: OcrPoint[];
  /** Embers at the sweep's best concurrency and raw, taking turns: the saturation ratio's measurement. */
  saturation: SaturationTurns;
  /** Raw, Embers and a plain HTTP server at concurrency 1, taking turns in short blocks: what Embers adds. */
  pairedC1: PairedC1;
  overhead: {
    concurrency: number;
    echo: Measured;
    ping: Measured;
    /** `echo` and ping taking turns at other concurrencies too (this point's included): where each saturates. */
    sweep?: OverheadPoint[];
    /** The best `echo` req/s of the sweep ÷ the best ping req/s (not a target: the target is at `concurrency`). */
    bestEchoVsBestPing?: number;
  };
  ratios: Ratios;
  pass: Record<string, boolean>;
  /** ocr started from zero, models in S3 and then on the node's disk (bench/cold.ts). */
  coldStart?: ColdStartResult;
  /** Why the cold-start section has no result. */
  coldStartError?: string;
  /** A photo to ocr as base64 JSON and as the file itself, at c = 1 (bench/body.ts). */
  bodies?: BodySection;
  bodiesError?: string;
  /** Bulk batches: echo and ocr items/s, live p99 with a batch running (bench/batch.ts). */
  batches?: BatchSection;
  batchesError?: string;
  /** Dynamic batching on and off, the same model (bench/batching.ts). */
  batching?: BatchingSection;
  batchingError?: string;
  /** The light model against raw and a plain server (bench/light.ts). */
  light?: LightSection;
  lightError?: string;
  /** The design's bare path against `echo` and ping (bench/floor.ts). */
  floor?: FloorSection;
  floorError?: string;
  /** `ocr` against the pipeline split into functions that call each other, and one call hop (bench/split.ts). */
  split?: SplitSection;
  splitError?: string;
}

/** What `BENCH_ONLY=cold` writes (bench/results/latest-cold.json). */
export interface ColdOnlyResult {
  date: string;
  durationSeconds: number;
  machine: BenchResult['machine'];
  git: BenchResult['git'];
  coldStart: ColdStartResult;
}

export function computeRatios(ocr: OcrPoint[], raw: Pick<RawPipeline, 'reqPerSec'>, saturation: Pick<SaturationTurns, 'ratio'>, paired: PairedC1, echo: Measured, ping: Measured, batching?: BatchingSection, light?: Pick<LightSection, 'embersVsRaw' | 'lowestEmbersVsRaw'>): { ratios: Ratios; pass: Record<string, boolean> } {
  const best = Math.max(...ocr.map((p) => p.embers.reqPerSec));
  const ratios: Ratios = {
    embers_vs_raw: saturation.ratio,
    embers_vs_raw_sweep: best / raw.reqPerSec,
    embers_vs_naive: Object.fromEntries(ocr.map((p) => [`c${p.concurrency}`, p.ratio])),
    added_p50_ms_at_c1: paired.addedP50Ms,
    ...(paired.plain
      ? {
          plain_http_added_p50_ms_at_c1: paired.plain.addedP50Ms,
          plain_http_outside_handler_ms_at_c1: paired.plain.outsideHandlerMs,
          embers_outside_handler_over_plain_http_ms_at_c1: paired.outsideHandlerMs - paired.plain.outsideHandlerMs,
        }
      : {}),
    echo_vs_ping: echo.reqPerSec / ping.reqPerSec,
    ...echoVsPingByCpu(echo, ping),
    ...(batching ? { dynamic_batching_gain: batching.gain } : {}),
    cpu_us_per_echo: cpuPerRequestUs(echo),
    ...(light ? { light_vs_raw: light.embersVsRaw, light_vs_raw_lowest: light.lowestEmbersVsRaw } : {}),
  };
  const pass: Record<string, boolean> = {
    embers_vs_raw: meets('embers_vs_raw', ratios.embers_vs_raw),
    added_p50_ms_at_c1: meets('added_p50_ms_at_c1', ratios.added_p50_ms_at_c1),
    echo_vs_ping: meets('echo_vs_ping', ratios.echo_vs_ping),
    cpu_us_per_echo: meets('cpu_us_per_echo', ratios.cpu_us_per_echo!),
    ...(light ? { light_vs_raw: meets('light_vs_raw', light.embersVsRaw), light_vs_raw_lowest: meets('light_vs_raw_lowest', light.lowestEmbersVsRaw) } : {}),
  };
  for (const [c, r] of Object.entries(ratios.embers_vs_naive)) pass[`embers_vs_naive.${c}`] = meets('embers_vs_naive', r);
  const verdict = batching && batchingVerdict(batching);
  if (verdict !== undefined) pass.dynamic_batching_gain = verdict;
  return { ratios, pass };
}

/**
 * CPU µs per answered request by role (cores busy ÷ req/s; the cores include the turns' warm-ups,
 * run at the same rate), roles under 0.01 cores left out; empty when nothing was answered.
 */
export function cpuPerRequestByRole(m: Pick<Measured, 'cores' | 'reqPerSec'>): Record<string, number> {
  if (!(m.reqPerSec > 0)) return {};
  return Object.fromEntries(Object.entries(m.cores).filter(([, n]) => n >= 0.01).map(([role, n]) => [role, (n / m.reqPerSec) * 1e6]));
}

/** All processes' CPU µs per answered request (0 when unmeasured: no /proc, or no answers). */
export const cpuPerRequestUs = (m: Pick<Measured, 'cores' | 'reqPerSec'>): number => Object.values(cpuPerRequestByRole(m)).reduce((a, b) => a + b, 0);

/** `{ echo_vs_ping_by_cpu }` when both sides' CPU was measured, else nothing. */
export function echoVsPingByCpu(echo: Pick<Measured, 'cores' | 'reqPerSec'>, ping: Pick<Measured, 'cores' | 'reqPerSec'>): Pick<Ratios, 'echo_vs_ping_by_cpu'> {
  const [e, p] = [cpuPerRequestUs(echo), cpuPerRequestUs(ping)];
  return e > 0 && p > 0 ? { echo_vs_ping_by_cpu: p / e } : {};
}

/** Whether both of the batching section's functions ran their model on an accelerator (its target applies there only). */
export const onGpu = (b: Pick<BatchingSection, 'provider'>): boolean => !['cpu', 'unknown', 'mixed'].includes(b.provider);

/**
 * The batching target's verdict: only on a GPU, and only when both sides answered every request
 * (a side with failures would make the ratio say nothing). Undefined: no verdict.
 */
export function batchingVerdict(b: BatchingSection): boolean | undefined {
  if (!onGpu(b)) return undefined;
  const clean = b.points.every((p) => !p.batched.errors && !p.batched.abandoned && !p.single.errors && !p.single.abandoned);
  return clean && Number.isFinite(b.gain) && meets('dynamic_batching_gain', b.gain);
}
