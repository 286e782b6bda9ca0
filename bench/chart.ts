// Throughput (x) against p99 latency (y, log scale) per concurrency, Embers and naive, as a
// hand-written SVG.
import type { BenchResult } from './result.ts';

const W = 760;
const H = 460;
const PAD = { left: 70, right: 150, top: 40, bottom: 56 };

interface Series {
  name: string;
  color: string;
  points: { x: number; y: number; label: string }[];
}

const esc = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');

export function chartSvg(r: BenchResult): string {
  const series: Series[] = [
    { name: 'Embers', color: '#d9480f', points: r.ocr.map((p) => ({ x: p.embers.reqPerSec, y: p.embers.latencyMs.p99, label: `c=${p.concurrency}` })) },
    { name: 'naive', color: '#1c7ed6', points: r.ocr.map((p) => ({ x: p.naive.reqPerSec, y: p.naive.latencyMs.p99, label: `c=${p.concurrency}` })) },
  ].map((s) => ({ ...s, points: s.points.filter((p) => Number.isFinite(p.x) && Number.isFinite(p.y) && p.y > 0) }));
  const raw = r.raw.pipeline.reqPerSec;
  const all = series.flatMap((s) => s.points);
  const xMax = niceCeil(Math.max(raw, ...all.map((p) => p.x)) * 1.1);
  const yLo = 10 ** Math.floor(Math.log10(Math.min(...all.map((p) => p.y), r.raw.pipeline.latencyMs.p99)));
  const yHi = 10 ** Math.ceil(Math.log10(Math.max(...all.map((p) => p.y))));
  const plotW = W - PAD.left - PAD.right;
  const plotH = H - PAD.top - PAD.bottom;
  const sx = (x: number) => PAD.left + (x / xMax) * plotW;
  const sy = (y: number) => PAD.top + plotH - ((Math.log10(y) - Math.log10(yLo)) / (Math.log10(yHi) - Math.log10(yLo))) * plotH;

  const parts: string[] = [];
  parts.push(`<rect width="${W}" height="${H}" fill="white"/>`);
  parts.push(`<text x="${PAD.left}" y="24" font-size="15" font-weight="bold">OCR: throughput vs p99 latency (closed loop, per concurrency)</text>`);
  // Axes and grid.
  for (let i = 0; i <= 5; i++) {
    const x = (xMax * i) / 5;
    parts.push(`<line x1="${sx(x)}" y1="${PAD.top}" x2="${sx(x)}" y2="${PAD.top + plotH}" stroke="#eee"/>`);
    parts.push(`<text x="${sx(x)}" y="${PAD.top + plotH + 18}" font-size="11" text-anchor="middle">${+x.toFixed(1)}</text>`);
  }
  for (let y = yLo; y <= yHi * 1.001; y *= 10) {
    parts.push(`<line x1="${PAD.left}" y1="${sy(y)}" x2="${PAD.left + plotW}" y2="${sy(y)}" stroke="#eee"/>`);
    parts.push(`<text x="${PAD.left - 6}" y="${sy(y) + 4}" font-size="11" text-anchor="end">${y >= 1000 ? `${y / 1000} s` : `${y} ms`}</text>`);
  }
  parts.push(`<rect x="${PAD.left}" y="${PAD.top}" width="${plotW}" height="${plotH}" fill="none" stroke="#333"/>`);
  parts.push(`<text x="${PAD.left + plotW / 2}" y="${H - 14}" font-size="12" text-anchor="middle">throughput (requests/s)</text>`);
  parts.push(`<text transform="translate(18 ${PAD.top + plotH / 2}) rotate(-90)" font-size="12" text-anchor="middle">p99 latency (log scale)</text>`);
  // The raw limit: the sequential in-process pipeline.
  parts.push(`<line x1="${sx(raw)}" y1="${PAD.top}" x2="${sx(raw)}" y2="${PAD.top + plotH}" stroke="#555" stroke-dasharray="4 4"/>`);
  parts.push(`<text x="${sx(raw) + 4}" y="${PAD.top + 12}" font-size="11" fill="#555">raw pipeline ${raw.toFixed(1)}/s</text>`);
  // Series.
  series.forEach((s, i) => {
    const path = s.points.map((p, k) => `${k ? 'L' : 'M'}${sx(p.x).toFixed(1)},${sy(p.y).toFixed(1)}`).join(' ');
    parts.push(`<path d="${path}" fill="none" stroke="${s.color}" stroke-width="2"/>`);
    for (const p of s.points) {
      parts.push(`<circle cx="${sx(p.x).toFixed(1)}" cy="${sy(p.y).toFixed(1)}" r="4" fill="${s.color}"/>`);
      parts.push(`<text x="${(sx(p.x) + 6).toFixed(1)}" y="${(sy(p.y) - 6).toFixed(1)}" font-size="10" fill="${s.color}">${esc(p.label)}</text>`);
    }
    const ly = PAD.top + 20 + i * 20;
    parts.push(`<line x1="${W - PAD.right + 16}" y1="${ly}" x2="${W - PAD.right + 40}" y2="${ly}" stroke="${s.color}" stroke-width="2"/>`);
    parts.push(`<text x="${W - PAD.right + 46}" y="${ly + 4}" font-size="12">${esc(s.name)}</text>`);
  });
  parts.push(`<text x="${W - PAD.right + 16}" y="${PAD.top + 70}" font-size="10" fill="#555">${esc(r.date.slice(0, 10))}</text>`);
  parts.push(`<text x="${W - PAD.right + 16}" y="${PAD.top + 84}" font-size="10" fill="#555">${esc(`${r.machine.cores} cores, ORT ${r.machine.ortVersion}`)}</text>`);
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="DejaVu Sans, sans-serif">\n${parts.join('\n')}\n</svg>\n`;
}

/** 1, 2 or 5 times a power of ten, at least n. */
function niceCeil(n: number): number {
  if (!(n > 0)) return 1;
  const p = 10 ** Math.floor(Math.log10(n));
  return ([1, 2, 5, 10].find((m) => m * p >= n) ?? 10) * p;
}
