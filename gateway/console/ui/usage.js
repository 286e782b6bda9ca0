// #/usage: requests, compute and cost by day over the last 30 days.
import { api } from './api.js';
import { plot } from './charts.js';
import { fmt, h, section, table } from './view.js';

const DAYS = 30;

export async function usagePage(main) {
  const chart = h('div', { class: 'chart', id: 'chart-usage' });
  const cost = h('div', { class: 'chart', id: 'chart-cost' });
  const rows = h('div');
  main.replaceChildren(section(`Usage, last ${DAYS} days`, h('div', { class: 'charts' }, chart, cost), rows));
  const update = async () => {
    const to = new Date(Date.now() + 86_400_000).toISOString().slice(0, 10);
    const from = new Date(Date.now() - (DAYS - 1) * 86_400_000).toISOString().slice(0, 10);
    const { data } = await api('/v1/usage', { query: { from, to, granularity: 'day' } });
    const days = [];
    for (let t = Date.parse(from); t < Date.parse(to); t += 86_400_000) days.push(t);
    const sum = (k) => days.map((d) => data.data.filter((r) => Date.parse(r.period) === d).reduce((a, r) => a + r[k], 0));
    plot(chart, { title: 'Requests and compute-seconds per day', times: days, series: [{ label: 'requests', values: sum('requests'), bars: true }, { label: 'compute s', values: sum('computeSeconds') }] });
    plot(cost, { title: 'Cost per day', times: days, series: [{ label: 'cost', values: sum('cost'), bars: true }] });
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
