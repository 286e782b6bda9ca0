// The raw limit, in this process with nothing else running: the cls model alone in a tight
// loop, and the ocr handler on direct ORT sessions, one request after another.
import os from 'node:os';
import { loadOcrFunction } from './ocr-fn.ts';
import { MODELS, createSession, handlerContext, modelHandle, ort, threadSettings, type ThreadSetting } from './ort.ts';
import type { LoadRun } from './load.ts';
import { latency, timedLoop, type Latency, type Window } from './stats.ts';

export interface ClsPoint extends ThreadSetting {
  batch: number;
  itemsPerSec: number;
  p50BatchMs: number;
}

export interface RawPipeline extends ThreadSetting {
  requests: number;
  reqPerSec: number;
  latencyMs: Latency;
  /** The handler's output for the test image, to check the servers against. */
  output: unknown;
}

export const CLS_BATCHES = [1, 8, 16, 32];
/** Thread settings of the raw runs: 1 thread, every core, every core spinning while running. */
export const RAW_SETTINGS = threadSettings(os.availableParallelism());

export async function rawCls(w: Window): Promise<ClsPoint[]> {
  const points: ClsPoint[] = [];
  for (const { threads, spin } of RAW_SETTINGS) {
    const session = await createSession(MODELS.cls, threads, spin);
    try {
      for (const batch of CLS_BATCHES) {
        const data = Float32Array.from({ length: batch * 3 * 48 * 192 }, () => Math.random() * 2 - 1);
        const feeds = { [session.inputNames[0]]: new ort.Tensor('float32', data, [batch, 3, 48, 192]) };
        const { durations, seconds } = await timedLoop(() => session.run(feeds), w);
        points.push({ batch, threads, ...(spin ? { spin } : {}), itemsPerSec: (durations.length * batch) / seconds, p50BatchMs: latency(durations).p50 });
      }
    } finally {
      await session.release();
    }
  }
  return points;
}

/** The ocr handler at each thread setting; the fastest (sequential: also the lowest latency) first. */
export async function rawPipelines(image: string, w: Window): Promise<RawPipeline[]> {
  const out: RawPipeline[] = [];
  for (const setting of RAW_SETTINGS) out.push(await rawPipeline(image, w, setting));
  return out.sort((a, b) => b.reqPerSec - a.reqPerSec);
}

export const bestCls = (points: ClsPoint[]): ClsPoint => points.reduce((a, b) => (b.itemsPerSec > a.itemsPerSec ? b : a));

/** The ocr handler with models calling ORT directly (with the platform's session options), loaded once. */
export interface OpenPipeline {
  /** One request through the handler; resolves with its output. */
  run(): Promise<unknown>;
  close(): Promise<void>;
}

export async function openRawPipeline(image: string, { threads, spin }: ThreadSetting): Promise<OpenPipeline> {
  const fn = await loadOcrFunction();
  const [det, rec] = await Promise.all([createSession(MODELS.det, threads, spin), createSession(MODELS.rec, threads, spin)]);
  const ctx = handlerContext({ det: modelHandle(det), rec: modelHandle(rec) }, { name: fn.name, version: 'bench' }, 'bench');
  const input = { image };
  return {
    run: () => Promise.resolve(fn.handler(input, ctx)),
    close: async () => void (await Promise.all([det.release(), rec.release()])),
  };
}

/** The raw pipeline in a tight loop, one request after another. */
export async function rawPipeline(image: string, w: Window, setting: ThreadSetting = { threads: 1 }): Promise<RawPipeline> {
  const pipeline = await openRawPipeline(image, setting);
  try {
    const output = await pipeline.run();
    const { durations, seconds } = await timedLoop(() => pipeline.run(), w);
    return { threads: setting.threads, ...(setting.spin ? { spin: true } : {}), requests: durations.length, reqPerSec: durations.length / seconds, latencyMs: latency(durations), output };
  } finally {
    await pipeline.close();
  }
}

/**
 * The raw pipeline as one side of bench/turns.ts's turns: each turn opens fresh sessions (none
 * left spinning through the other side's turn), warms up, measures, and closes them.
 */
export function rawPipelineSide(image: string, setting: ThreadSetting): (w: Window) => Promise<LoadRun> {
  return async (w) => {
    const pipeline = await openRawPipeline(image, setting);
    try {
      const t0 = performance.now();
      const { durations, seconds } = await timedLoop(() => pipeline.run(), w);
      const warmupSeconds = (performance.now() - t0) / 1000 - seconds;
      const result = { concurrency: 1, requests: durations.length, errors: 0, seconds, reqPerSec: durations.length / seconds, latencyMs: latency(durations), statuses: {}, warmupSeconds, abandoned: 0 };
      return { result, samples: durations, timings: new Map() };
    } finally {
      await pipeline.close();
    }
  };
}

export function machine() {
  const cpus = os.cpus();
  return {
    cpuModel: cpus[0]?.model ?? 'unknown',
    cores: cpus.length,
    totalMemGiB: Math.round(os.totalmem() / 2 ** 30),
    node: process.version,
    platform: `${os.platform()} ${os.release()}`,
    /** 1, 5 and 15 minute load averages: other work on the machine skews every figure. */
    loadAvgAtStart: os.loadavg().map((l) => Math.round(l * 100) / 100),
  };
}
