// The console: sign-in, the page the address's #fragment names, and a refresh every 10 s.
import { api, ApiError, session } from './api.js';
import { functionsPage } from './functions.js';
import { functionPage } from './function.js';
import { workPage } from './work.js';
import { usagePage } from './usage.js';
import { errorBox, h } from './view.js';

const REFRESH_MS = 10_000;
const main = document.getElementById('main');
const nav = document.getElementById('nav');
const who = document.getElementById('who');
let current = null;
let shown = 0;

function signInPage(message) {
  const key = h('input', { id: 'key', type: 'password', autocomplete: 'off', placeholder: 'API key', required: true, 'aria-label': 'API key' });
  const submit = async (e) => {
    e.preventDefault();
    session.signIn(key.value.trim());
    await start();
  };
  nav.hidden = true;
  who.replaceChildren();
  main.replaceChildren(
    h(
      'form',
      { id: 'sign-in', class: 'sign-in', onsubmit: submit },
      h('h1', {}, 'Sign in'),
      h('p', { class: 'muted' }, 'With an API key (`embers keys create`, or the key `npm start` prints). It is kept for this browser tab only.'),
      message ? errorBox(new Error(message)) : null,
      key,
      h('button', { type: 'submit' }, 'Sign in'),
    ),
  );
  key.focus();
}

/** Checks the key, learns whether it is the admin key, and shows the page. */
async function start() {
  let me;
  try {
    ({ data: me } = await api('/v1/whoami'));
  } catch (err) {
    session.signOut();
    return signInPage(err instanceof ApiError && err.status === 401 ? 'That key was not accepted.' : err.message);
  }
  session.admin = me.admin;
  nav.hidden = false;
  const out = h('button', { id: 'sign-out', type: 'button', onclick: () => (session.signOut(), signInPage()) }, 'Sign out');
  who.replaceChildren(session.admin ? await tenantPicker() : h('span', { id: 'tenant-name' }, `tenant ${me.tenant}`), out);
  await show();
}

async function tenantPicker() {
  const { data } = await api('/v1/tenants');
  const select = h('select', { id: 'tenant', 'aria-label': 'tenant', onchange: (e) => ((session.tenant = e.target.value), show()) }, h('option', { value: '' }, 'default tenant (admin)'), data.tenants.map((t) => h('option', { value: t.id, selected: t.id === session.tenant }, t.name ? `${t.name} (${t.id})` : t.id)));
  return h('label', {}, 'Tenant ', select);
}

async function show() {
  if (!session.key) return signInPage();
  const route = location.hash.replace(/^#\/?/, '').split('/').map(decodeURIComponent);
  const n = ++shown;
  current = null;
  for (const a of nav.querySelectorAll('a')) a.classList.toggle('here', location.hash.startsWith(a.getAttribute('href')));
  try {
    const page = route[0] === 'functions' && route[1] ? await functionPage(main, route[1]) : route[0] === 'jobs' ? await workPage(main) : route[0] === 'usage' ? await usagePage(main) : await functionsPage(main);
    if (n === shown) current = page;
  } catch (err) {
    if (err instanceof ApiError && err.status === 401) return signInPage('The key is no longer accepted.');
    main.replaceChildren(errorBox(err));
  }
}

setInterval(() => {
  if (document.hidden || !current?.update) return;
  current.update().catch((err) => console.warn('refresh failed:', err.message));
}, REFRESH_MS);

window.addEventListener('hashchange', () => void show());
if (session.key) void start();
else signInPage();
