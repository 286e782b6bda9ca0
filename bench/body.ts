// What a request body's encoding costs: the same photo sent to `ocr` as base64 JSON and as the
// file itself (the function's binaryInput), at concurrency 1, the two taking turns in short
// blocks so the machine's drift cancels. Inference dominates a photo's request, so the
// difference is read from Embers' own split (compute input: from the replica taking the
// request to its first model call, parsing and decoding included; gateway + transport) and
// from the CPU each process spent per request, not from the client's latency alone.
import http from 'node:http';
import sharp from 'sharp';
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

  result(): BodySide {
    const l = latency(this.ms);
    const timing = Object.fromEntries([...this.timings].map(([k, v]) => [k, mean(v)]));
    timing.gateway = (timing.total ?? Number.NaN) - (timing.queue ?? 0) - (timing.handler ?? Number.NaN);
    const n = this.ms.length;
    return {
      bytes: this.target.body?.length ?? 0,
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
  let rounds = 0;
  try {
    for (let i = 0; i < 2; i++) for (const s of [sides.json, sides.binary]) await s.block(false);
    const end = performance.now() + o.seconds * 1000;
    while (performance.now() < end) {
      const order = rounds++ % 2 === 0 ? [sides.json, sides.binary] : [sides.binary, sides.json];
      for (const s of order) await s.block(true);
    }
  } finally {
    sides.json.close();
    sides.binary.close();
  }
  return { image: { width: meta.width ?? 0, height: meta.height ?? 0, jpegBytes: photo.length }, rounds, json: sides.json.result(), binary: sides.binary.result() };
}

export function formatBodies(b: BodySection): string {
  const f = (n: number | undefined, d = 1) => (n === undefined || !Number.isFinite(n) ? '-' : n.toFixed(d));
  const roles = [...new Set([...Object.keys(b.json.cpuMsPerRequest), ...Object.keys(b.binary.cpuMsPerRequest)])].filter((r) => r !== 'naive' && r !== 'other').sort();
  const row = (name: string, s: BodySide) =>
    [name, String(s.bytes), String(s.requests), f(s.p50Ms), f(s.meanMs), f(s.timing.input, 2), f(s.timing.infer), f(s.timing.gateway, 2), ...roles.map((r) => f(s.cpuMsPerRequest[r], 2))].map((c, i) => (i === 0 ? c.padEnd(6) : c.padStart(i === 1 ? 9 : 8)));
  const header = ['body', 'bytes', 'answers', 'p50', 'mean', 'input', 'infer', 'gw+tr', ...roles.map((r) => `${r.slice(0, 7)}`)].map((c, i) => (i === 0 ? c.padEnd(6) : c.padStart(i === 1 ? 9 : 8)));
  const d = (k: (s: BodySide) => number) => f(k(b.json) - k(b.binary), 2);
  return [
    `Request body: a ${b.image.width}×${b.image.height} JPEG to ocr at c = 1, base64 JSON against the file itself (binaryInput), taking turns (${b.rounds} rounds of blocks of ${BLOCK}; ms; input = compute input, gw+tr = total − queue − handler; CPU ms per request by process):`,
    header.join(' '),
    ...[row('json', b.json), row('binary', b.binary)].map((r) => r.join(' ')),
    `  the file itself saves ${d((s) => s.p50Ms)} ms p50, ${d((s) => s.timing.input)} ms compute input, ${d((s) => s.timing.gateway)} ms gateway + transport; CPU per request: ${roles.map((r) => `${r} ${d((s) => s.cpuMsPerRequest[r])} ms`).join(', ')}`,
    ...[b.json, b.binary].filter((s) => s.errors).map((s) => `  ! ${s.errors} errors; first: ${s.firstError}`),
  ].join('\n');
}
