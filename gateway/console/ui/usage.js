// #/usage: requests, compute and cost by day over the last 30 days.
import { api } from './api.js';
import { plot } from './charts.js';
import { fmt, h, section, table } from './view.js';

const DAYS = 30;

export async function usagePage(main) {
  // Requests, compute-seconds and cost each on their own axis: counts and seconds on one scale
  // would flatten whichever is smaller.
  const charts = { requests: h('div', { class: 'chart', id: 'chart-usage-requests' }), compute: h('div', { class: 'chart', id: 'chart-compute' }), cost: h('div', { class: 'chart', id: 'chart-cost' }) };
  const rows = h('div');
  main.replaceChildren(section(`Usage, last ${DAYS} days`, h('div', { class: 'charts' }, charts.requests, charts.compute, charts.cost), rows));
  const update = async () => {
    const to = new Date(Date.now() + 86_400_000).toISOString().slice(0, 10);
    const from = new Date(Date.now() - (DAYS - 1) * 86_400_000).toISOString().slice(0, 10);
    const { data } = await api('/v1/usage', { query: { from, to, granularity: 'day' } });
    const days = [];
    for (let t = Date.parse(from); t < Date.parse(to); t += 86_400_000) days.push(t);
    const sum = (k) => days.map((d) => data.data.filter((r) => Date.parse(r.period) === d).reduce((a, r) => a + r[k], 0));
    plot(charts.requests, { title: 'Requests per day', times: days, whole: true, series: [{ label: 'requests', values: sum('requests'), bars: true }, { label: 'errors', values: sum('errors'), bars: true }] });
    plot(charts.compute, { title: 'Compute per day', times: days, unit: 's', series: [{ label: 'compute', values: sum('computeSeconds'), bars: true }] });
    plot(charts.cost, { title: 'Cost per day', times: days, series: [{ label: 'cost', values: sum('cost'), bars: true }] });
    rows.replaceChildren(
      table(
        [
          ['Day', (r) => r.period.slice(0, 10)],
          ['Tenant', (r) => r.tenant],
          ['Function', (r) => r.function],
          ['Requests', (r) => fmt.n(r.requests)],
          ['Errors', (r) => fmt.n(r.errors)],
          ['Cold starts', (r) => fmt.n(r.coldStarts)],
          ['Compute s', (r) => r.computeSeconds.toFixed(2)],
          ['In / out', (r) => `${fmt.bytes(r.bytesIn)} / ${fmt.bytes(r.bytesOut)}`],
          ['Cost', (r) => fmt.money(r.cost)],
        ],
        [...data.data].reverse(),
        'No usage in this period.',
      ),
    );
  };
  await update();
  return { update };
}
