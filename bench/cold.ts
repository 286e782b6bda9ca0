// Cold starts of `ocr` from zero, measured by one request each:
//  - s3:   a fresh `embers dev` (fresh data dir): the replica fetches its models from S3;
//  - disk: `embers dev` restarted on the same data dir: the models are in the node's disk cache
//          (<EMBERS_DATA_DIR>/cache/models), model_fetch should be 0.
// Each case REPEATS times; medians reported per number. Run alone with BENCH_ONLY=cold.
import { readdirSync, rmSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { launchEmbers, type ColdStartRecord, type EmbersProcess } from './servers.ts';
import { percentile, sleep } from './stats.ts';
import type { ColdStartPhases } from '../core/contracts.ts';

export const REPEATS = 3;
/** The whole section stays under this; a repeat that would not fit is skipped (with a warning). */
export const SECTION_MS = 90_000;
/** One `embers dev` start (deploy included), at most. */
const START_TIMEOUT_MS = 60_000;
/** Target: cold total − model_load − model_fetch, models on disk. */
export const OUTSIDE_SESSION_TARGET_MS = 150;

export const PHASES = ['spawn', 'bundle', 'model_fetch', 'model_load', 'setup', 'warmup', 'total'] as const;
export type Phase = (typeof PHASES)[number];

/** One cold request. Times in ms. */
export interface ColdSample {
  /** Client side: request sent (new connection) → response headers. */
  clientMs: number;
  /** Client side: request sent → last body byte. */
  clientBodyMs: number;
  status: number;
  /** Recognised text, lines joined by " | ". */
  text: string;
  /** Server-Timing entries (cold, queue, input, batch, infer, output, handler, total). */
  serverTiming: Record<string, number>;
  /** Embers-Cold-Start phases (whole ms); absent when the answer did not wait for a cold start. */
  phases?: Record<Phase, number>;
  /** phases.total − model_load − model_fetch. */
  outsideSessionMs: number;
  /** phases.total − the sum of the other phases: time inside the cold start that no phase names. */
  unattributedMs: number;
  /** Server-Timing queue − cold: waiting for a replica to be placed and spawned, plus picking the job up once ready. */
  queueMinusColdMs: number;
  /** The replica's record in GET /v1/functions/ocr coldStarts (unrounded), when found. */
  record?: ColdStartRecord;
  /** `embers dev` start → GET /v1/functions/ocr answers (deploy included). */
  startupMs: number;
  /** Model files in <data dir>/cache/models before the request. */
  cachedModelFiles: number;
}

/** Medians over the samples, each number on its own. */
export interface ColdCase extends ColdStartPhases {
  clientMs: number;
  clientBodyMs: number;
  coldMs: number;
  queueMs: number;
  handlerMs: number;
  inferMs: number;
  gatewayTotalMs: number;
  outsideSessionMs: number;
  unattributedMs: number;
  queueMinusColdMs: number;
  startupMs: number;
  samples: ColdSample[];
}

export interface ColdStartResult {
  function: 'ocr';
  repeats: number;
  seconds: number;
  s3: ColdCase;
  disk: ColdCase;
  target: { outsideSessionMs: number };
  /** disk.outsideSessionMs ≤ target. */
  pass: boolean;
  warnings: string[];
}

const TIMING_ENTRY = /([\w-]+);dur=([\d.]+)/g;

function parseServerTiming(header: string | undefined): Record<string, number> {
  const out: Record<string, number> = {};
  for (const m of (header ?? '').matchAll(TIMING_ENTRY)) out[m[1]] = Number(m[2]);
  return out;
}

/** `spawn=1;bundle=95;model_fetch=0;…;total=501` → numbers, or undefined when a phase is missing. */
export function parseColdStart(header: string | undefined): Record<Phase, number> | undefined {
  if (!header) return undefined;
  const kv = new Map(header.split(';').map((p) => p.trim().split('=') as [string, string]));
  const out = {} as Record<Phase, number>;
  for (const p of PHASES) {
    const v = Number(kv.get(p));
    if (kv.get(p) === undefined || !Number.isFinite(v)) return undefined;
    out[p] = v;
  }
  return out;
}

interface Answer {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: string;
  headersMs: number;
  bodyMs: number;
}

/** One POST on a new connection; times from just before the request is written. */
function post(port: number, route: string, headers: Record<string, string>, body: Buffer, timeoutMs: number): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    const req = http.request(
      { host: '127.0.0.1', port, method: 'POST', path: route, agent: false, headers: { ...headers, 'content-length': String(body.length) } },
      (res) => {
        const headersMs = performance.now() - t0;
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks).toString('utf8'), headersMs, bodyMs: performance.now() - t0 }));
        res.on('error', reject);
      },
    );
    req.setTimeout(timeoutMs, () => req.destroy(new Error(`no answer within ${timeoutMs} ms`)));
    req.on('error', reject);
    req.end(body);
  });
}

const ocrText = (body: string): string => {
  try {
    const lines = (JSON.parse(body) as { lines?: { text: string }[] }).lines;
    return Array.isArray(lines) ? lines.map((l) => l.text).join(' | ') : `unexpected: ${body.slice(0, 200)}`;
  } catch {
    return `unexpected: ${body.slice(0, 200)}`;
  }
};

function countFiles(dir: string): number {
  try {
    return readdirSync(dir, { recursive: true, withFileTypes: true }).filter((d) => d.isFile()).length;
  } catch {
    return 0;
  }
}

/**
 * Starts `embers dev` on dataDir, waits until GET /v1/functions/ocr answers (no wake-up call),
 * sends one POST /v1/run/ocr and stops it again.
 */
async function coldRequest(label: string, dataDir: string, ocrBody: Buffer, deadline: number, warn: (w: string) => void, log: (l: string) => void): Promise<ColdSample> {
  const left = () => deadline - Date.now();
  if (left() < 1000) throw new Error(`cold-start section: out of time (${SECTION_MS / 1000} s) before ${label}`);
  const t0 = performance.now();
  const embers: EmbersProcess = await launchEmbers({ dataDir, timeoutMs: Math.min(START_TIMEOUT_MS, left()) });
  try {
    const end = Date.now() + Math.min(START_TIMEOUT_MS, left());
    let view: Awaited<ReturnType<EmbersProcess['describe']>> | undefined;
    while (!(view = await embers.describe('ocr').catch(() => undefined))) {
      if (Date.now() > end) throw new Error(`${label}: GET /v1/functions/ocr did not answer within ${START_TIMEOUT_MS / 1000} s:\n${embers.child.tail}`);
      await sleep(50);
    }
    const startupMs = performance.now() - t0;
    const ready = view.replicas.filter((r) => r.state === 'ready' || r.state === 'starting');
    if (ready.length) warn(`${label}: ocr already had replicas before the request (${ready.map((r) => `${r.id} ${r.state}`).join(', ')}): not a start from zero`);
    const cachedModelFiles = countFiles(path.join(dataDir, 'cache', 'models'));

    const sentAt = Date.now();
    const a = await post(
      embers.port,
      '/v1/run/ocr',
      { authorization: `Bearer ${embers.apiKey}`, 'content-type': 'application/json' },
      ocrBody,
      Math.max(1000, Math.min(START_TIMEOUT_MS, left())),
    );
    if (a.status !== 200) throw new Error(`${label}: POST /v1/run/ocr answered ${a.status}: ${a.body.slice(0, 300)}`);
    const serverTiming = parseServerTiming(a.headers['server-timing'] as string | undefined);
    const coldHeader = a.headers['embers-cold-start'] as string | undefined;
    const phases = parseColdStart(coldHeader);
    if (!phases) warn(`${label}: no usable Embers-Cold-Start header (${coldHeader ?? 'absent'}); Server-Timing: ${a.headers['server-timing'] ?? 'absent'}`);
    if (serverTiming.cold === undefined) warn(`${label}: Server-Timing has no cold entry: ${a.headers['server-timing'] ?? 'absent'}`);

    // The replica's own record (unrounded); it may be written just after the reply.
    let record: ColdStartRecord | undefined;
    for (const until = Date.now() + 3000; !record && Date.now() < until; ) {
      const v = await embers.describe('ocr').catch(() => undefined);
      record = v?.coldStarts?.find((c) => Date.parse(c.at) >= sentAt - 5 && c.totalMs !== undefined);
      if (!record) await sleep(100);
    }
    if (!record) warn(`${label}: no coldStarts record in GET /v1/functions/ocr newer than the request`);
    else if (phases && Math.abs(record.totalMs - phases.total) > 1) warn(`${label}: header total ${phases.total} ms ≠ record total ${record.totalMs.toFixed(1)} ms`);

    const outsideSessionMs = phases ? phases.total - phases.model_load - phases.model_fetch : Number.NaN;
    const unattributedMs = phases ? phases.total - PHASES.filter((p) => p !== 'total').reduce((a, p) => a + phases[p], 0) : Number.NaN;
    const queueMinusColdMs = (serverTiming.queue ?? Number.NaN) - (serverTiming.cold ?? Number.NaN);
    const sample: ColdSample = {
      clientMs: a.headersMs,
      clientBodyMs: a.bodyMs,
      status: a.status,
      text: ocrText(a.body),
      serverTiming,
      phases,
      outsideSessionMs,
      unattributedMs,
      queueMinusColdMs,
      record,
      startupMs,
      cachedModelFiles,
    };
    log(`${label}: client ${a.headersMs.toFixed(0)} ms, ${coldHeader ?? 'no cold header'}, handler ${serverTiming.handler ?? '-'} ms (embers dev up in ${(startupMs / 1000).toFixed(1)} s)`);
    return sample;
  } finally {
    await embers.stop();
  }
}

const median = (xs: number[]): number => {
  const s = Float64Array.from(xs.filter(Number.isFinite)).sort();
  // Nearest-rank p50 is the lower middle for an even count; average the two instead.
  if (s.length % 2 === 0 && s.length) return (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
  return percentile(s, 50);
};

function summarise(samples: ColdSample[]): ColdCase {
  const m = (f: (s: ColdSample) => number | undefined) => median(samples.map((s) => f(s) ?? Number.NaN));
  const ph = (p: Phase) => m((s) => s.phases?.[p]);
  return {
    clientMs: m((s) => s.clientMs),
    clientBodyMs: m((s) => s.clientBodyMs),
    coldMs: m((s) => s.serverTiming.cold),
    queueMs: m((s) => s.serverTiming.queue),
    handlerMs: m((s) => s.serverTiming.handler),
    inferMs: m((s) => s.serverTiming.infer),
    gatewayTotalMs: m((s) => s.serverTiming.total),
    spawnMs: ph('spawn'),
    bundleMs: ph('bundle'),
    modelFetchMs: ph('model_fetch'),
    modelLoadMs: ph('model_load'),
    setupMs: ph('setup'),
    warmupMs: ph('warmup'),
    totalMs: ph('total'),
    outsideSessionMs: m((s) => s.outsideSessionMs),
    unattributedMs: m((s) => s.unattributedMs),
    queueMinusColdMs: m((s) => s.queueMinusColdMs),
    startupMs: m((s) => s.startupMs),
    samples,
  };
}

/** Both cases, REPEATS times each, within SECTION_MS. */
export async function coldStartSection(ocrBody: Buffer, log: (line: string) => void): Promise<ColdStartResult> {
  const began = Date.now();
  const deadline = began + SECTION_MS;
  const warnings: string[] = [];
  const warn = (w: string) => {
    warnings.push(w);
    log(`! ${w}`);
  };
  const s3: ColdSample[] = [];
  const disk: ColdSample[] = [];
  for (let i = 1; i <= REPEATS; i++) {
    // A repeat costs about what the previous ones did on average; skip it if it would not fit.
    const perRepeat = i > 1 ? (Date.now() - began) / (i - 1) : 0;
    if (i > 1 && Date.now() + perRepeat * 1.2 > deadline) {
      warn(`skipped repeats ${i}..${REPEATS}: one takes ~${(perRepeat / 1000).toFixed(0)} s and the section is bounded to ${SECTION_MS / 1000} s`);
      break;
    }
    const dataDir = await mkdtemp(path.join(os.tmpdir(), 'embers-bench-cold-'));
    // Also removed if this process exits another way (Ctrl-C): by then the children are gone.
    const removeDataDir = () => rmSync(dataDir, { recursive: true, force: true });
    process.once('exit', removeDataDir);
    try {
      const a = await coldRequest(`s3 #${i}`, dataDir, ocrBody, deadline, warn, log);
      if (a.cachedModelFiles) warn(`s3 #${i}: the model cache held ${a.cachedModelFiles} file(s) before the request`);
      if (a.phases && a.phases.model_fetch === 0) warn(`s3 #${i}: model_fetch is 0 although the data dir was fresh`);
      s3.push(a);
      const b = await coldRequest(`disk #${i}`, dataDir, ocrBody, deadline, warn, log);
      if (!b.cachedModelFiles) warn(`disk #${i}: ${path.join('<data dir>', 'cache', 'models')} was empty before the request`);
      if (b.phases && b.phases.model_fetch !== 0) warn(`disk #${i}: model_fetch is ${b.phases.model_fetch} ms, expected 0 (models on the node's disk)`);
      disk.push(b);
    } finally {
      await rm(dataDir, { recursive: true, force: true });
      process.off('exit', removeDataDir);
    }
  }
  const texts = new Set([...s3, ...disk].map((s) => s.text));
  if (texts.size > 1) warn(`the cold requests recognised different texts: ${[...texts].map((t) => `"${t}"`).join(', ')}`);
  const diskCase = summarise(disk);
  return {
    function: 'ocr',
    repeats: Math.min(s3.length, disk.length),
    seconds: (Date.now() - began) / 1000,
    s3: summarise(s3),
    disk: diskCase,
    target: { outsideSessionMs: OUTSIDE_SESSION_TARGET_MS },
    pass: diskCase.outsideSessionMs <= OUTSIDE_SESSION_TARGET_MS,
    warnings,
  };
}

// ---- printing ----

const num = (n: number | undefined, digits = 0): string => (n === undefined || !Number.isFinite(n) ? '-' : n.toFixed(digits));

function table(header: string[], rows: string[][]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)));
  const line = (cells: string[]) => cells.map((c, i) => (i === 0 ? c.padEnd(widths[i]) : c.padStart(widths[i]))).join('  ');
  return [line(header), widths.map((w) => '-'.repeat(w)).join('  '), ...rows.map(line)].join('\n');
}

export const coldVerdict = (r: ColdStartResult): string => (r.pass ? 'PASS' : 'MISS');

export function formatCold(r: ColdStartResult): string {
  const out: string[] = [];
  out.push(
    `Cold start of ocr from zero: one POST /v1/run/ocr to a just-started \`embers dev\`, ${r.repeats} repeat(s) per case (medians, each column on its own; ms).`,
    's3 = fresh data dir, models fetched from S3; disk = embers dev restarted on the same data dir, models in the node cache.',
    'client = request sent → response headers; cold, queue, handler (of this first request) from Server-Timing; spawn … total from Embers-Cold-Start;',
    'queue−cold = request queued → replica spawned (scheduler decision, placement) + job pickup once ready; other = total − the named phases;',
    'outside = outside ORT session creation = total − model_load − model_fetch.',
  );
  const header = ['case', 'client', 'cold', 'queue−cold', 'spawn', 'bundle', 'model_fetch', 'model_load', 'setup', 'warmup', 'other', 'total', 'outside', 'handler', ''];
  const row = (name: string, c: ColdCase, verdict: string): string[] => [
    name,
    num(c.clientMs),
    num(c.coldMs),
    num(c.queueMinusColdMs),
    num(c.spawnMs),
    num(c.bundleMs),
    num(c.modelFetchMs),
    num(c.modelLoadMs),
    num(c.setupMs),
    num(c.warmupMs),
    num(c.unattributedMs),
    num(c.totalMs),
    num(c.outsideSessionMs),
    num(c.handlerMs),
    verdict,
  ];
  const sampleRow = (name: string, s: ColdSample): string[] => [
    name,
    num(s.clientMs),
    num(s.serverTiming.cold),
    num(s.queueMinusColdMs),
    ...PHASES.filter((p) => p !== 'total').map((p) => num(s.phases?.[p])),
    num(s.unattributedMs),
    num(s.phases?.total),
    num(s.outsideSessionMs),
    num(s.serverTiming.handler),
    '',
  ];
  out.push(
    table(header, [
      row('s3 (median)', r.s3, ''),
      row('disk (median)', r.disk, `${coldVerdict(r)} (target ≤ ${r.target.outsideSessionMs})`),
      ...r.s3.samples.map((s, i) => sampleRow(`  s3 #${i + 1}`, s)),
      ...r.disk.samples.map((s, i) => sampleRow(`  disk #${i + 1}`, s)),
    ]),
  );
  out.push(`embers dev start until GET /v1/functions/ocr answers (deploy included), median: s3 ${num(r.s3.startupMs / 1000, 1)} s, disk ${num(r.disk.startupMs / 1000, 1)} s; section took ${num(r.seconds, 0)} s.`);
  for (const w of r.warnings) out.push(`  ! ${w}`);
  return out.join('\n');
}

export const coldSummaryLine = (r: ColdStartResult): string =>
  `  cold_outside_session_ms.disk ${num(r.disk.outsideSessionMs, 1).padStart(7)}  target ≤ ${r.target.outsideSessionMs.toFixed(2)}  ${coldVerdict(r)}   (cold total ${num(r.disk.totalMs)} − model_load ${num(r.disk.modelLoadMs)} − model_fetch ${num(r.disk.modelFetchMs)}; client first response ${num(r.disk.clientMs)} ms, s3 ${num(r.s3.clientMs)} ms)`;
