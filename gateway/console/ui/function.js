// #/functions/<name>: one function over the last hour (requests, latency, queue depth, replicas,
// the functions it called and was called by), its versions, replicas, cold starts and batching,
// and a form to run it.
import { api, ApiError } from './api.js';
import { coldStartBars, plot } from './charts.js';
import { stateOf } from './functions.js';
import { badge, errorBox, fmt, fnLink, h, section, table } from './view.js';

const WINDOW_MIN = 60;

export async function functionPage(main, name) {
  const charts = { requests: h('div', { class: 'chart', id: 'chart-requests' }), latency: h('div', { class: 'chart', id: 'chart-latency' }), depth: h('div', { class: 'chart', id: 'chart-depth' }) };
  const head = h('div');
  const totals = h('p', { id: 'totals' });
  const parts = { versions: h('div'), replicas: h('div'), coldStarts: h('div'), batching: h('div'), calls: h('div') };
  main.replaceChildren(
    head,
    runForm(name, () => update()),
    section('Last hour', totals, h('div', { class: 'charts' }, charts.requests, charts.latency, charts.depth)),
    section('Calls (last hour)', parts.calls),
    section('Cold starts', parts.coldStarts),
    section('Replicas', parts.replicas),
    section('Batching', parts.batching),
    section('Versions', parts.versions),
  );
  const update = async () => {
    let detail, series;
    try {
      [{ data: detail }, { data: series }] = await Promise.all([api(`/v1/functions/${encodeURIComponent(name)}`), api('/v1/series', { query: { minutes: WINDOW_MIN, function: name } })]);
    } catch (err) {
      if (err instanceof ApiError && err.status === 404) {
        main.replaceChildren(h('h1', {}, name), errorBox(new Error(`No function "${name}" for this key.`)));
        return;
      }
      throw err;
    }
    const f = series.functions[0];
    const times = f.points.map((p) => Date.parse(p.at));
    head.replaceChildren(h('h1', {}, name, ' ', badge(stateOf(detail))), h('p', { class: 'muted' }, `Endpoint ${detail.endpoint} · active version ${detail.active}`));
    totals.replaceChildren(`${fmt.n(f.summary.requests)} requests, ${fmt.n(f.summary.errors)} errors, ${fmt.n(f.summary.coldStarts)} cold starts; p50 ${fmt.ms(f.summary.p50Ms)}, p99 ${fmt.ms(f.summary.p99Ms)}`);
    totals.dataset.requests = String(f.summary.requests);
    const values = (k) => f.points.map((p) => p[k]);
    plot(charts.requests, { title: 'Requests and errors per minute', times, whole: true, series: [{ label: 'requests', values: values('requests'), bars: true }, { label: 'errors', values: values('errors'), bars: true }] });
    plot(charts.latency, { title: 'Latency (queue wait + handler)', times, unit: 'ms', series: [{ label: 'p50', values: values('p50Ms') }, { label: 'p99', values: values('p99Ms') }] });
    plot(charts.depth, { title: 'Queue depth and ready replicas', times, whole: true, series: [{ label: 'waiting or running', values: values('depth') }, { label: 'ready replicas', values: values('ready') }] });
    parts.calls.replaceChildren(callList('Calls:', 'calls-out', detail.calls.out), callList('Called by:', 'calls-in', detail.calls.in));
    parts.coldStarts.replaceChildren(coldStartBars(detail.coldStarts.filter((s) => s.totalMs !== undefined)));
    parts.replicas.replaceChildren(
      table(
        [
          ['Replica', (r) => r.id],
          ['State', (r) => badge(r.state)],
          ['Version', (r) => r.version],
          ['Node', (r) => r.node ?? r.host],
          ['Started', (r) => fmt.time(r.startedAt)],
          ['Active', (r) => fmt.n(r.jobs?.active ?? 0)],
          ['Memory', (r) => (r.memory?.usedBytes ? fmt.bytes(r.memory.usedBytes) : '–')],
        ],
        detail.replicas,
        detail.scale?.reason ? `No replicas: ${detail.scale.reason}` : 'No replicas: it scales from zero on the next request.',
      ),
    );
    parts.batching.replaceChildren(batching(detail.replicas));
    parts.versions.replaceChildren(
      table(
        [
          ['Version', (v) => (v.version === detail.active ? h('b', {}, `${v.version} (active)`) : v.version)],
          ['Deployed', (v) => fmt.time(v.createdAt)],
          ['Bundle', (v) => fmt.bytes(v.bundleBytes)],
        ],
        [...detail.versions].reverse(),
      ),
    );
  };
  await update();
  return { update };
}

/** The functions at the other end of its calls (`ctx.call`), each with its last call, or "none". */
function callList(label, id, edges) {
  const list = edges.length ? edges.flatMap((e, i) => [...(i ? [', '] : []), fnLink(e.name), h('span', { class: 'muted' }, ` ${fmt.ago(e.lastAt)}`)]) : [h('span', { class: 'muted' }, 'none')];
  return h('p', { id }, h('b', {}, label), ' ', ...list);
}

/** Each model's batcher counters, summed over the replicas (Triton's inference and execution counts). */
function batching(replicas) {
  const models = new Map();
  for (const r of replicas) {
    for (const [model, s] of Object.entries(r.models ?? {})) {
      const m = models.get(model) ?? { model, requests: 0, inferences: 0, executions: 0, maxCallsPerBatch: 0, provider: s.provider };
      m.requests += s.requests ?? 0;
      m.inferences += s.inferences ?? 0;
      m.executions += s.executions ?? 0;
      m.maxCallsPerBatch = Math.max(m.maxCallsPerBatch, s.maxCallsPerBatch ?? 0);
      models.set(model, m);
    }
  }
  return table(
    [
      ['Model', (m) => m.model],
      ['Provider', (m) => m.provider ?? '–'],
      ['Calls', (m) => fmt.n(m.requests)],
      ['Rows inferred', (m) => fmt.n(m.inferences)],
      ['Executions', (m) => fmt.n(m.executions)],
      ['Rows per execution', (m) => (m.executions ? (m.inferences / m.executions).toFixed(2) : '–')],
      ['Most calls in one', (m) => fmt.n(m.maxCallsPerBatch)],
    ],
    [...models.values()],
    'No model sessions in its replicas now.',
  );
}

/** A JSON input and its answer. */
function runForm(name, ran) {
  const input = h('textarea', { id: 'run-input', rows: 4, spellcheck: 'false', 'aria-label': 'input (JSON)' }, '{}');
  const out = h('pre', { id: 'run-output', class: 'muted' }, 'The answer shows here.');
  const run = async (e) => {
    e.preventDefault();
    let body;
    try {
      body = JSON.parse(input.value);
    } catch (err) {
      out.replaceChildren(`The input is not JSON: ${err.message}`);
      return;
    }
    out.replaceChildren('Running…');
    const began = performance.now();
    try {
      const { data, res } = await api(`/v1/run/${encodeURIComponent(name)}`, { method: 'POST', body });
      out.dataset.status = String(res.status);
      out.replaceChildren(`${res.status} in ${fmt.ms(performance.now() - began)}${res.headers.get('x-request-id') ? ` · request ${res.headers.get('x-request-id')}` : ''}\n${typeof data === 'string' ? data : JSON.stringify(data, null, 2)}`);
    } catch (err) {
      out.dataset.status = String(err.status ?? 0);
      out.replaceChildren(`${err.status ?? ''} ${err.code ?? ''}: ${err.message}`);
    }
    await ran();
  };
  return section('Run', h('form', { id: 'run-form', onsubmit: run }, input, h('button', { type: 'submit' }, 'Run')), out);
}
