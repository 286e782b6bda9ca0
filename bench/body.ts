// What a body's encoding costs. Requests: the same photo sent to `ocr` as base64 JSON and as the
// file itself (the function's binaryInput), at concurrency 1, the two taking turns in short
// blocks so the machine's drift cancels. Inference dominates a photo's request, so the
// difference is read from Embers' own split (compute input: from the replica taking the
// request to its first model call, parsing and decoding included; gateway + transport) and
// from the CPU each process spent per request, not from the client's latency alone.
// Answers: as many bytes as the photo, answered by bench/functions/blob.ts as the bytes
// themselves (binary()) and as base64 JSON, taking turns the same way (no model: all of it is
// encoding and transport).
import http from 'node:http';
import sharp from 'sharp';
import { deployFunctions } from './servers.ts';
import { coresByRole, sampleCpu } from './cpu.ts';
import { parseTiming, sendBlock, type ServerTiming, type Target } from './load.ts';
import { latency, mean } from './stats.ts';

/** Requests per block; the first of each block is not counted (it follows the other side's block). */
const BLOCK = 4;

export interface BodySide {
  /** Bytes of the request body. */
  bytes: number;
  requests: number;
  errors: number;
  firstError?: string;
  p50Ms: number;
  meanMs: number;
  /** Means of the Server-Timing entries (ms), `gateway` = total − queue − handler. */
  timing: ServerTiming;
  /** CPU per counted request by role (ms), over this side's blocks (first requests included in the time, so slightly high). */
  cpuMsPerRequest: Record<string, number>;
}

export interface BodySection {
  image: { width: number; height: number; jpegBytes: number };
  rounds: number;
  json: BodySide;
  binary: BodySide;
  /** Answers of `bytes` bytes (bench/functions/blob.ts): base64 JSON against the bytes themselves. */
  answer?: { bytes: number; rounds: number; json: BodySide; binary: BodySide };
  /** Why the answer part did not run to the end. */
  answerError?: string;
}

/** A 1600×1200 JPEG of a few text lines on grainy paper (seeded: the same bytes every run), ~0.8 MB. */
export async function testPhoto(): Promise<Buffer> {
  const width = 1600;
  const height = 1200;
  const paper = Buffer.alloc(width * height * 3);
  let seed = 0x2026;
  for (let i = 0; i < paper.length; i++) {
    seed = (seed * 1_103_515_245 + 12_345) >>> 0;
    paper[i] = 190 + (seed >>> 26);
  }
  const lines = ['INVOICE 2026-11-24', 'EMBERS INFERENCE LTD', 'TOTAL 1234.56 EUR', 'THANK YOU'];
  const svg =
    `<svg width="${width}" height="${height}" xmlns="http://www.w3.org/2000/svg">` +
    lines.map((l, i) => `<text x="120" y="${260 + i * 220}" font-size="96" font-family="DejaVu Sans">${l}</text>`).join('') +
    '</svg>';
  return sharp(paper, { raw: { width, height, channels: 3 } })
    .composite([{ input: Buffer.from(svg) }])
    .jpeg({ quality: 92 })
    .toBuffer();
}

class Side {
  readonly ms: number[] = [];
  readonly timings = new Map<string, number[]>();
  readonly ticks: Record<string, number> = {};
  errors = 0;
  firstError?: string;
  private readonly agent = new http.Agent({ keepAlive: true, maxSockets: 1 });

  constructor(
    readonly target: Target,
    private readonly groups: number[],
  ) {}

  async block(keep: boolean): Promise<void> {
    const cpu0 = sampleCpu(this.groups);
    const t0 = performance.now();
    const answers = await sendBlock(this.agent, this.target, BLOCK);
    if (!keep) return;
    answers.forEach((a, i) => {
      if (a.status < 200 || a.status >= 300) {
        this.errors++;
        this.firstError ??= a.error;
      } else if (i > 0) {
        this.ms.push(a.ms);
        if (a.timing) parseTiming(a.timing, this.timings);
      }
    });
    const seconds = (performance.now() - t0) / 1000;
    for (const [role, cores] of Object.entries(coresByRole(cpu0, sampleCpu(this.groups), seconds))) this.ticks[role] = (this.ticks[role] ?? 0) + cores * seconds * 1000;
  }

  result(bytes = this.target.body?.length ?? 0): BodySide {
    const l = latency(this.ms);
    const timing = Object.fromEntries([...this.timings].map(([k, v]) => [k, mean(v)]));
    timing.gateway = (timing.total ?? Number.NaN) - (timing.queue ?? 0) - (timing.handler ?? Number.NaN);
    const n = this.ms.length;
    return {
      bytes,
      requests: n,
      errors: this.errors,
      ...(this.firstError ? { firstError: this.firstError } : {}),
      p50Ms: l.p50,
      meanMs: l.mean,
      timing,
      cpuMsPerRequest: Object.fromEntries(Object.entries(this.ticks).map(([role, ms]) => [role, n ? ms / n : Number.NaN])),
    };
  }

  close(): void {
    this.agent.destroy();
  }
}

/** Warm-up rounds, then rounds (JSON and binary blocks, alternating which goes first) for `seconds`. */
export async function bodySection(o: { port: number; apiKey: string; groups: number[]; seconds: number; log: (l: string) => void }): Promise<BodySection> {
  const photo = await testPhoto();
  const meta = await sharp(photo).metadata();
  const headers = { authorization: `Bearer ${o.apiKey}` };
  const base = { port: o.port, method: 'POST', path: '/v1/run/ocr' } as const;
  const json = Buffer.from(JSON.stringify({ image: photo.toString('base64') }));
  const sides = {
    json: new Side({ ...base, headers: { ...headers, 'content-type': 'application/json', 'content-length': String(json.length) }, body: json }, o.groups),
    binary: new Side({ ...base, headers: { ...headers, 'content-type': 'image/jpeg', 'content-length': String(photo.length) }, body: photo }, o.groups),
  };
  o.log(`request body: a ${meta.width}×${meta.height} JPEG (${photo.length} B) to ocr as base64 JSON (${json.length} B) and as the file, taking turns in blocks of ${BLOCK}`);
  const rounds = await takeBlockTurns(sides.json, sides.binary, o.seconds);
  const section: BodySection = { image: { width: meta.width ?? 0, height: meta.height ?? 0, jpegBytes: photo.length }, rounds, json: sides.json.result(), binary: sides.binary.result() };
  try {
    section.answer = await answerPart({ ...o, bytes: photo.length });
  } catch (err) {
    section.answerError = err instanceof Error ? err.message : String(err);
    o.log(`answer body part failed: ${section.answerError}`);
  }
  return section;
}

/** Two warm-up rounds, then rounds of a block each (alternating which goes first) for `seconds`; closes both. */
async function takeBlockTurns(a: Side, b: Side, seconds: number): Promise<number> {
  let rounds = 0;
  try {
    for (let i = 0; i < 2; i++) for (const s of [a, b]) await s.block(false);
    const end = performance.now() + seconds * 1000;
    while (performance.now() < end) {
      const order = rounds++ % 2 === 0 ? [a, b] : [b, a];
      for (const s of order) await s.block(true);
    }
  } finally {
    a.close();
    b.close();
  }
  return rounds;
}

/** Deploys bench/functions/blob.ts and has it answer `bytes` bytes as base64 JSON and as the bytes, taking turns. */
async function answerPart(o: { port: number; apiKey: string; groups: number[]; seconds: number; bytes: number; log: (l: string) => void }): Promise<NonNullable<BodySection['answer']>> {
  await deployFunctions(o, ['bench/functions/blob.ts']);
  const side = (as: 'json' | 'binary') => {
    const body = Buffer.from(JSON.stringify({ bytes: o.bytes, as }));
    return new Side({ port: o.port, method: 'POST', path: '/v1/run/blob', headers: { authorization: `Bearer ${o.apiKey}`, 'content-type': 'application/json', 'content-length': String(body.length) }, body }, o.groups);
  };
  const sides = { json: side('json'), binary: side('binary') };
  o.log(`answer body: ${o.bytes} B from blob as base64 JSON and as the bytes, taking turns in blocks of ${BLOCK} (the first call waits for a cold start)`);
  const rounds = await takeBlockTurns(sides.json, sides.binary, o.seconds);
  return { bytes: o.bytes, rounds, json: sides.json.result(Math.ceil(o.bytes / 3) * 4 + '{"image":""}'.length), binary: sides.binary.result(o.bytes) };
}

export function formatBodies(b: BodySection): string {
  const f = (n: number | undefined, d = 1) => (n === undefined || !Number.isFinite(n) ? '-' : n.toFixed(d));
  const sides = [b.json, b.binary, ...(b.answer ? [b.answer.json, b.answer.binary] : [])];
  const roles = [...new Set(sides.flatMap((s) => Object.keys(s.cpuMsPerRequest)))].filter((r) => r !== 'naive' && r !== 'other').sort();
  const pad = (cells: string[]) => cells.map((c, i) => (i === 0 ? c.padEnd(6) : c.padStart(i === 1 ? 9 : 8))).join(' ');
  const header = pad(['body', 'bytes', 'answers', 'p50', 'mean', 'input', 'infer', 'output', 'gw+tr', ...roles.map((r) => `${r.slice(0, 7)}`)]);
  const row = (name: string, s: BodySide) => pad([name, String(s.bytes), String(s.requests), f(s.p50Ms), f(s.meanMs), f(s.timing.input, 2), f(s.timing.infer), f(s.timing.output, 2), f(s.timing.gateway, 2), ...roles.map((r) => f(s.cpuMsPerRequest[r], 2))]);
  const saves = (json: BodySide, bin: BodySide, what: string) => {
    const d = (k: (s: BodySide) => number) => f(k(json) - k(bin), 2);
    return `  ${what} saves ${d((s) => s.p50Ms)} ms p50, ${d((s) => s.timing.input)} ms compute input, ${d((s) => s.timing.output)} ms compute output, ${d((s) => s.timing.gateway)} ms gateway + transport; CPU per request: ${roles.map((r) => `${r} ${d((s) => s.cpuMsPerRequest[r])} ms`).join(', ')}`;
  };
  const errors = (ss: BodySide[]) => ss.filter((s) => s.errors).map((s) => `  ! ${s.errors} errors; first: ${s.firstError}`);
  const lines = [
    `Request body: a ${b.image.width}×${b.image.height} JPEG to ocr at c = 1, base64 JSON against the file itself (binaryInput), taking turns (${b.rounds} rounds of blocks of ${BLOCK}; ms; input/output = compute input/output, gw+tr = total − queue − handler; CPU ms per request by process):`,
    header,
    row('json', b.json),
    row('binary', b.binary),
    saves(b.json, b.binary, 'the file itself'),
    ...errors([b.json, b.binary]),
  ];
  if (b.answer) {
    const a = b.answer;
    lines.push(
      `Answer body: ${a.bytes} B from blob (no model) at c = 1, base64 JSON against the bytes themselves (binary()), taking turns (${a.rounds} rounds of blocks of ${BLOCK}):`,
      header,
      row('json', a.json),
      row('binary', a.binary),
      saves(a.json, a.binary, 'the bytes themselves'),
      ...errors([a.json, a.binary]),
    );
  }
  if (b.answerError) lines.push(`Answer body: not measured: ${b.answerError}`);
  return lines.join('\n');
}
