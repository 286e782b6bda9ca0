// #/functions: every function of the tenant with its state, replicas and the last 15 minutes.
import { api } from './api.js';
import { badge, fmt, fnLink, h, section, table } from './view.js';

const WINDOW_MIN = 15;

export async function functionsPage(main) {
  const body = h('div');
  main.replaceChildren(section(`Functions (last ${WINDOW_MIN} minutes)`, body));
  const update = async () => {
    const [{ data: list }, { data: series }] = await Promise.all([api('/v1/functions'), api('/v1/series', { query: { minutes: WINDOW_MIN } })]);
    const stats = new Map(series.functions.map((f) => [f.name, f.summary]));
    // Replicas come from each function's own record: the console shows few functions at a time.
    const details = await Promise.all(list.functions.slice(0, 100).map((f) => api(`/v1/functions/${encodeURIComponent(f.name)}`).then((r) => r.data, () => null)));
    const rows = list.functions.map((f, i) => ({ ...f, detail: details[i], stats: stats.get(f.name) }));
    body.replaceChildren(
      table(
        [
          ['Function', (f) => fnLink(f.name)],
          ['State', (f) => badge(stateOf(f.detail))],
          ['Replicas', (f) => replicaCounts(f.detail?.replicas ?? [])],
          ['Version', (f) => f.active],
          ['Requests/s', (f) => fmt.rate(f.stats?.perSecond ?? 0)],
          ['p50', (f) => fmt.ms(f.stats?.p50Ms)],
          ['p99', (f) => fmt.ms(f.stats?.p99Ms)],
          ['Errors', (f) => fmt.n(f.stats?.errors ?? 0)],
          ['Cold starts', (f) => fmt.n(f.stats?.coldStarts ?? 0)],
        ],
        rows,
        'No functions yet: `embers deploy <file>` deploys one.',
      ),
    );
  };
  await update();
  return { update };
}

/** What a function is doing, from its replicas and the scheduler's last decision. */
export function stateOf(detail) {
  if (!detail) return 'unknown';
  const states = (detail.replicas ?? []).map((r) => r.state);
  if (states.includes('ready')) return 'serving';
  if (states.includes('starting')) return 'starting';
  if (states.includes('failed')) return 'failing';
  return (detail.scale?.desired ?? 0) > 0 ? 'starting' : 'idle';
}

export function replicaCounts(replicas) {
  if (!replicas.length) return h('span', { class: 'muted' }, '0');
  const counts = {};
  for (const r of replicas) counts[r.state] = (counts[r.state] ?? 0) + 1;
  return h('span', {}, Object.entries(counts).map(([state, n]) => h('span', { class: 'count' }, `${n} ${state}`)));
}
