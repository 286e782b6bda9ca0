// Building the page: elements from data, never HTML from data (a function's name or output is
// text, whatever it contains), and the numbers as people read them.

/** An element with attributes (`on…` functions are listeners) and children (strings are text). */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs ?? {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat()) if (c !== undefined && c !== null && c !== false) el.append(c instanceof Node ? c : String(c));
  return el;
}

/** A table of rows; `columns` are [heading, row → cell]. */
export function table(columns, rows, empty = 'Nothing yet.') {
  if (!rows.length) return h('p', { class: 'muted' }, empty);
  return h('table', {}, h('thead', {}, h('tr', {}, columns.map(([head]) => h('th', {}, head)))), h('tbody', {}, rows.map((r) => h('tr', {}, columns.map(([, cell]) => h('td', {}, cell(r)))))));
}

export function section(title, ...children) {
  return h('section', {}, h('h2', {}, title), ...children);
}

export const fmt = {
  ms: (x) => (x === null || x === undefined ? '–' : x >= 1000 ? `${(x / 1000).toFixed(2)} s` : `${x >= 10 ? Math.round(x) : x.toFixed(1)} ms`),
  n: (x) => (x === null || x === undefined ? '–' : Number(x).toLocaleString('en')),
  rate: (x) => (x >= 10 ? x.toFixed(0) : x >= 0.1 ? x.toFixed(2) : x > 0 ? x.toFixed(3) : '0'),
  bytes: (x) => (x >= 2 ** 30 ? `${(x / 2 ** 30).toFixed(1)} GiB` : x >= 2 ** 20 ? `${(x / 2 ** 20).toFixed(1)} MiB` : x >= 1024 ? `${(x / 1024).toFixed(1)} KiB` : `${x} B`),
  time: (iso) => (iso ? new Date(iso).toLocaleString('en-GB', { hour12: false }) : '–'),
  ago: (iso) => {
    const s = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
    return s < 60 ? `${Math.round(s)} s ago` : s < 3600 ? `${Math.round(s / 60)} min ago` : `${(s / 3600).toFixed(1)} h ago`;
  },
  money: (x) => (x === 0 ? '0' : x < 0.01 ? x.toPrecision(2) : x.toFixed(2)),
};

/** A bar filled to `done` of `total`. */
export function progress(done, total) {
  const pct = total ? Math.round((100 * done) / total) : 0;
  return h('span', { class: 'progress', title: `${done} of ${total}` }, h('span', { class: 'fill', style: `width:${pct}%` }), h('span', { class: 'label' }, `${done} / ${total}`));
}

/** A function's name, linking to its page. */
export const fnLink = (name) => h('a', { href: `#/functions/${encodeURIComponent(name)}`, class: 'fn' }, name);

/** A state as a coloured tag. */
export const badge = (text) => h('span', { class: `badge ${String(text).replace(/[^a-z_]/g, '')}` }, text);

export function errorBox(err) {
  return h('p', { class: 'error', role: 'alert' }, err?.message ?? String(err));
}
