// #/jobs: async jobs and batch jobs, newest first, with their progress.
import { api } from './api.js';
import { badge, fmt, h, progress, section, table } from './view.js';

export async function workPage(main) {
  const jobs = h('div');
  const batches = h('div');
  main.replaceChildren(section('Jobs', jobs), section('Batches', batches));
  const update = async () => {
    const [{ data: j }, { data: b }] = await Promise.all([api('/v1/jobs', { query: { limit: 50 } }), api('/v1/batches', { query: { limit: 50 } })]);
    jobs.replaceChildren(
      table(
        [
          ['Job', (x) => x.id],
          ['Function', (x) => x.function],
          ['Status', (x) => badge(x.status)],
          ['HTTP', (x) => x.httpStatus ?? '–'],
          ['Created', (x) => fmt.time(x.createdAt)],
          ['Took', (x) => (x.finishedAt ? fmt.ms(Date.parse(x.finishedAt) - Date.parse(x.createdAt)) : '–')],
        ],
        j.data,
        'No async jobs: a run with `Prefer: respond-async` makes one.',
      ),
    );
    batches.replaceChildren(
      table(
        [
          ['Batch', (x) => x.id],
          ['Function', (x) => x.function],
          ['Status', (x) => (x.paused ? h('span', { title: x.paused.message }, badge('paused')) : badge(x.status))],
          ['Progress', (x) => progress(x.request_counts.completed + x.request_counts.failed, x.request_counts.total)],
          ['Failed lines', (x) => fmt.n(x.request_counts.failed)],
          ['Created', (x) => fmt.time(x.createdAt)],
        ],
        b.data,
        'No batches: `embers batch create` makes one.',
      ),
    );
  };
  await update();
  return { update };
}
