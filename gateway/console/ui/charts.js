// Plots with uPlot (loaded by index.html as the global uPlot), and the cold-start phase bars,
// which are plain elements. A plot's tick labels come from one formatter each, which both draws
// them and writes them into a visually hidden list beside the canvas, so screen readers and the
// browser test read what the axes show; each axis is as wide (or tall) as its widest label.
import { fmt, h } from './view.js';

const COLORS = ['#e4572e', '#2e86ab', '#76b041', '#a846a0', '#f3a712', '#4c5b61', '#17bebb'];
const FONT = '12px system-ui, sans-serif';
/** Counts go up in whole steps: a chart of 1 request marks 0 and 1, not 0.25. */
const WHOLE_INCRS = Array.from({ length: 16 }, (_, e) => [1, 2, 5].map((m) => m * 10 ** e)).flat();
const en = (decimals) => new Intl.NumberFormat('en', { minimumFractionDigits: decimals, maximumFractionDigits: decimals });

/** The decimals a step needs (0.25 → 2, 500 → 0): every tick, a multiple of it, shows them all and no float noise. */
function decimalsOf(step) {
  for (let d = 0; d < 12; d++) {
    const x = Math.abs(step) * 10 ** d;
    if (Math.abs(x - Math.round(x)) < 1e-9 * Math.max(1, x)) return d;
  }
  return 12;
}

/**
 * The y axis's labels for ticks `splits`, `step` apart: thousands separated, as many decimals as
 * the step has, with the unit; milliseconds read as seconds once a tick reaches 1,000.
 */
function yLabels(splits, step, unit) {
  const top = Math.max(...splits.filter((v) => v !== null).map(Math.abs), 0);
  const [scale, shown] = unit === 'ms' && top >= 1000 ? [1000, 's'] : [1, unit];
  const f = en(decimalsOf(step / scale));
  return splits.map((v) => (v === null ? null : `${f.format(v / scale)}${shown ? ` ${shown}` : ''}`));
}

/**
 * The x axis's labels (times in s): the time of day (24-hour, as the rest of the console shows
 * times), to the second when ticks are under a minute apart, or the day when a day or more apart.
 */
function xLabels(splits, step) {
  const f = step >= 86_400 ? { day: 'numeric', month: 'short' } : { hour: '2-digit', minute: '2-digit', ...(step < 60 ? { second: '2-digit' } : {}), hourCycle: 'h23' };
  return splits.map((t) => (t === null ? null : new Date(t * 1000).toLocaleString('en-GB', f)));
}

/** One value in the legend, as the tables show it. */
function legendValue(v, unit) {
  if (v === null || v === undefined) return '–';
  if (unit === 'ms') return fmt.ms(v);
  if (unit === 's') return `${en(2).format(v)} s`;
  return Number.isInteger(v) ? fmt.n(v) : fmt.money(v);
}

/** Width in CSS pixels of the widest of `labels` (lines split at \n) in the axis's font, as uPlot draws it. */
function widest(u, axis, labels) {
  const ctx = u.ctx;
  ctx.save();
  ctx.font = axis.font[0];
  const w = Math.max(0, ...labels.filter((l) => l !== null).flatMap((l) => String(l).split('\n')).map((l) => ctx.measureText(l).width));
  ctx.restore();
  return w / globalThis.uPlot.pxRatio;
}

/** A y axis as wide as its widest label, plus its tick and gap (and a pixel either side for antialiasing). */
function ySize(u, labels, i) {
  const axis = u.axes[i];
  if (!labels) return 50;
  return Math.ceil(widest(u, axis, labels) + axis.ticks.size + axis.gap + 2);
}

/** An x axis as tall as its labels' lines. */
function xSize(u, labels, i) {
  const axis = u.axes[i];
  const lines = Math.max(1, ...(labels ?? []).filter((l) => l !== null).map((l) => String(l).split('\n').length));
  return Math.ceil(axis.ticks.size + axis.gap + axis.font[2] * axis.lineGap * lines + 2);
}

/**
 * A chart of `series` ({ label, values, bars? }) over `times` (ms), its values in `unit` ('ms',
 * 's' or none) and, with `whole`, counted in whole steps: redraws in place when `el` already
 * holds one.
 */
export function plot(el, { title, times, series, unit = '', whole = false }) {
  const data = [times.map((t) => t / 1000), ...series.map((s) => s.values)];
  const width = Math.max(320, el.clientWidth || 600);
  if (el.chart && el.chart.series.length === series.length + 1) {
    el.chart.setData(data);
    return el.chart;
  }
  el.chart?.destroy();
  el.replaceChildren();
  const labels = [[], []];
  const ticks = [h('ul', { 'data-axis': 'x' }), h('ul', { 'data-axis': 'y' })];
  const shown = () => ticks.forEach((list, i) => list.replaceChildren(...labels[i].filter((l) => l !== null).map((l) => h('li', {}, l))));
  const bars = globalThis.uPlot.paths.bars({ size: [0.6, 40] });
  // Bars at either end would be cut in half at the plot's edge: the time scale reaches half a
  // point's interval further each way.
  const half = series.some((s) => s.bars) ? (times.length > 1 ? times[1] - times[0] : 60_000) / 2000 : 0;
  el.chart = new globalThis.uPlot(
    {
      title,
      width,
      height: 200,
      scales: {
        x: { time: true, range: (_, min, max) => (min === null ? [min, max] : [min - half, max + half]) },
        // All zeros (no cost yet) read 0 to 1, not uPlot's 0 to 100.
        y: { range: (_, min, max) => (min === null ? [min, max] : min === 0 && max === 0 ? [0, 1] : globalThis.uPlot.rangeNum(min, max, 0.1, true)) },
      },
      axes: [
        { font: FONT, size: xSize, values: (_, splits, _i, _space, step) => (labels[0] = xLabels(splits, step)) },
        { font: FONT, size: ySize, values: (_, splits, _i, _space, step) => (labels[1] = yLabels(splits, step, unit)), incrs: whole ? WHOLE_INCRS : undefined },
      ],
      series: [
        { value: (_, t) => (t === null ? '–' : fmt.time(t * 1000)) },
        ...series.map((s, i) => ({
          label: s.label,
          value: (_, v) => legendValue(v, unit),
          stroke: COLORS[i % COLORS.length],
          fill: s.bars ? `${COLORS[i % COLORS.length]}88` : undefined,
          width: 2,
          spanGaps: false,
          paths: s.bars ? bars : undefined,
          points: { show: !s.bars, size: 5 },
        })),
      ],
      hooks: { draw: [shown] },
    },
    data,
    el,
  );
  el.append(h('div', { class: 'visually-hidden' }, h('p', {}, `${title}, time axis:`), ticks[0], h('p', {}, `${title}, value axis:`), ticks[1]));
  return el.chart;
}

const PHASES = [
  ['spawnMs', 'spawn'],
  ['bundleMs', 'bundle'],
  ['modelFetchMs', 'model fetch'],
  ['modelLoadMs', 'model load'],
  ['setupMs', 'setup'],
  ['warmupMs', 'warmup'],
];

/** Each cold start as a bar of its phases, on one scale (the slowest start fills the width). */
export function coldStartBars(starts) {
  if (!starts.length) return h('p', { class: 'muted' }, 'No cold starts recorded.');
  const longest = Math.max(...starts.map((s) => s.totalMs ?? PHASES.reduce((a, [k]) => a + (s[k] ?? 0), 0)), 1);
  const legend = h('div', { class: 'legend' }, PHASES.map(([, name], i) => h('span', {}, h('i', { style: `background:${COLORS[i]}` }), name)));
  const rows = starts.map((s) =>
    h(
      'div',
      { class: 'coldstart' },
      h('span', { class: 'when' }, fmt.time(s.at ?? s.startedAt)),
      h(
        'span',
        { class: 'bar' },
        PHASES.filter(([k]) => (s[k] ?? 0) > 0).map(([k, name]) => h('span', { class: 'phase', title: `${name}: ${fmt.ms(s[k])}`, style: `width:${(100 * s[k]) / longest}%;background:${COLORS[PHASES.findIndex(([p]) => p === k)]}` })),
      ),
      h('span', { class: 'total' }, fmt.ms(s.totalMs)),
    ),
  );
  return h('div', { class: 'coldstarts' }, legend, rows);
}
