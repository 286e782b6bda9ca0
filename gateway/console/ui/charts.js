// Plots with uPlot (loaded by index.html as the global uPlot), and the cold-start phase bars,
// which are plain elements.
import { fmt, h } from './view.js';

const COLORS = ['#e4572e', '#2e86ab', '#76b041', '#a846a0', '#f3a712', '#4c5b61', '#17bebb'];

/** A chart of `series` ({ label, values, bars? }) over `times` (ms): redraws in place when `el` already holds one. */
export function plot(el, { title, times, series, unit = '' }) {
  const data = [times.map((t) => t / 1000), ...series.map((s) => s.values)];
  const width = Math.max(320, el.clientWidth || 600);
  if (el.chart && el.chart.series.length === series.length + 1) {
    el.chart.setData(data);
    return el.chart;
  }
  el.chart?.destroy();
  el.replaceChildren();
  const bars = globalThis.uPlot.paths.bars({ size: [0.6, 40] });
  el.chart = new globalThis.uPlot(
    {
      title,
      width,
      height: 200,
      scales: { x: { time: true } },
      axes: [{}, { values: (_, ticks) => ticks.map((v) => `${v}${unit}`), size: 60 }],
      series: [{}, ...series.map((s, i) => ({ label: s.label, stroke: COLORS[i % COLORS.length], fill: s.bars ? `${COLORS[i % COLORS.length]}88` : undefined, width: 2, spanGaps: false, paths: s.bars ? bars : undefined, points: { show: !s.bars, size: 5 } }))],
    },
    data,
    el,
  );
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
