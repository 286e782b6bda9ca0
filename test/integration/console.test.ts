// The web console in a real browser: headless Chromium (Debian's `chromium`, driven by
// playwright-core) against a running platform. A tenant signs in, sees its function, runs it and
// sees the run in the charts; the charts' axes read as whole numbers with their units, each
// label inside its axis; another tenant never sees it; a function's page lists the functions it
// called and was called by (as do the API and `embers functions show`); the page logs no errors.
// The screenshots are kept under test-results/.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { chromium, type Browser, type Page } from 'playwright-core';
import { EmbersClient } from '../../cli/client.ts';
import { deployFile } from '../../cli/deploy.ts';
import { keys } from '../../core/keys.ts';
import { qualifiedName } from '../../core/names.ts';
import { eventually, fixture, ROOT, shipped, startTestPlatform, tenantWithKey, type TestPlatform } from '../helpers/platform.ts';

const CHROMIUM = [process.env.EMBERS_CHROMIUM, '/usr/bin/chromium', '/usr/bin/chromium-browser', '/usr/bin/google-chrome'].find((p) => p && existsSync(p));
const ARTEFACTS = path.join(ROOT, 'test-results');
/** A number as an axis shows it: thousands separated, then a unit or none. */
const AXIS_LABEL = /^(\d{1,3}(?:,\d{3})*(?:\.\d{1,8})?)(?: (ms|s))?$/;

/** What a chart's axes read (the labels the chart writes beside its canvas) and how wide its y axis is against its widest label. */
type Axes = { x: string[]; y: string[]; widest: number; room: number };

/**
 * The y labels as numbers (ms for a time), checking each is whole: a full number with the unit
 * `unit` (for ms, ms or s), the ticks rising in equal steps, as a cut-off "000 ms" after "750 ms"
 * would not.
 */
function yValues(axes: Axes, unit: 'ms' | 's' | '', what: string): number[] {
  assert.ok(axes.y.length >= 2, `${what}: y labels ${JSON.stringify(axes.y)}`);
  const units = new Set<string>();
  const values = axes.y.map((label) => {
    const m = AXIS_LABEL.exec(label);
    assert.ok(m, `${what}: "${label}" is a whole number with its unit`);
    units.add(m[2] ?? '');
    return Number(m[1].replaceAll(',', '')) * (m[2] === 's' && unit === 'ms' ? 1000 : 1);
  });
  assert.equal(units.size, 1, `${what}: one unit on the axis, ${JSON.stringify(axes.y)}`);
  assert.ok(unit === 'ms' ? ['ms', 's'].includes([...units][0]) : units.has(unit), `${what}: labels in ${unit || 'plain numbers'}, ${JSON.stringify(axes.y)}`);
  const steps = values.slice(1).map((v, i) => v - values[i]);
  assert.ok(steps.every((d) => d > 0 && Math.abs(d - steps[0]) < 1e-6 * Math.max(1, steps[0])), `${what}: ticks rise in equal steps, ${JSON.stringify(axes.y)}`);
  assert.ok(axes.widest > 0 && axes.widest <= axes.room, `${what}: the widest label (${axes.widest.toFixed(1)} px) fits its axis (${axes.room} px)`);
  return values;
}

/** As root, Chromium's own sandbox cannot start; nothing else is reachable from these machines, so nothing background may call out. */
const FLAGS = ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'];

describe('the web console in Chromium', { skip: CHROMIUM ? false : 'Chromium is missing: install it (Debian: `apt-get install chromium`) or set EMBERS_CHROMIUM to its path' }, () => {
  let p: TestPlatform;
  let browser: Browser;
  let a: { id: string; key: string };
  let b: { id: string; key: string };
  /** Errors the pages logged, and those a step expects (a 404 it asked for). */
  const errors: string[] = [];
  let expected: RegExp | null = null;

  before(async () => {
    p = await startTestPlatform();
    [a, b] = [await tenantWithKey(p, 'console-a'), await tenantWithKey(p, 'console-b')];
    await deployFile(new EmbersClient({ url: p.url, apiKey: a.key }), fixture('tiny.ts'));
    await deployFile(new EmbersClient({ url: p.url, apiKey: b.key }), shipped('echo.ts'));
    browser = await chromium.launch({ executablePath: CHROMIUM, args: FLAGS });
    await mkdir(ARTEFACTS, { recursive: true });
  });
  after(async () => {
    await browser?.close();
    await p?.close();
  });

  async function signedIn(key: string): Promise<Page> {
    const page = await browser.newPage({ viewport: { width: 1280, height: 1000 } });
    page.on('console', (m) => {
      if (m.type() === 'error' && !expected?.test(m.text())) errors.push(m.text());
    });
    page.on('pageerror', (e) => errors.push(e.message));
    await page.goto(`${p.url}/console`);
    await page.fill('#key', key);
    await page.click('#sign-in button[type=submit]');
    await page.waitForSelector('#sign-out');
    return page;
  }

  /**
   * The labels chart `id` writes for its axes, the width of its widest y label in the font the
   * axis draws with, and the room its y axis leaves for labels beside its ticks.
   */
  function axesOf(page: Page, id: string): Promise<Axes> {
    // No named functions in here: tsx would wrap them in a helper the page does not have.
    return page.evaluate((id) => {
      type Chart = { axes: { font: string | [string]; gap: number; ticks: { size: number } }[] };
      const el = document.getElementById(id) as (HTMLElement & { chart: Chart }) | null;
      if (!el) throw new Error(`no chart #${id}`);
      const [x, y] = ['x', 'y'].map((axis) => [...el.querySelectorAll(`[data-axis="${axis}"] li`)].map((li) => li.textContent ?? ''));
      const axis = el.chart.axes[1];
      const ctx = document.createElement('canvas').getContext('2d')!;
      ctx.font = Array.isArray(axis.font) ? axis.font[0] : axis.font;
      const pxRatio = (globalThis as unknown as { uPlot: { pxRatio: number } }).uPlot.pxRatio;
      const widest = Math.max(0, ...y.map((l) => ctx.measureText(l).width)) / pxRatio;
      const yAxis = el.querySelectorAll<HTMLElement>('.u-axis')[1];
      return { x, y, widest, room: parseFloat(yAxis.style.width) - axis.ticks.size - axis.gap };
    }, id);
  }

  it('signs a tenant in, lists its function, runs it and shows the run in the charts', async () => {
    const page = await signedIn(a.key);
    await page.waitForSelector('a.fn');
    assert.deepEqual(await page.locator('a.fn').allTextContents(), ['tiny']);
    await page.click('a.fn');
    await page.waitForSelector('#run-form');
    await page.fill('#run-input', '{"n": 2}');
    await page.click('#run-form button[type=submit]');
    await page.waitForSelector('#run-output[data-status="200"]', { timeout: 60_000 });
    assert.match(await page.locator('#run-output').textContent() ?? '', /"classes"/);
    // The run reaches the per-minute roll-ups with its usage record; the page reads them every 10 s.
    await page.waitForFunction(() => Number(document.querySelector('#totals')?.getAttribute('data-requests') ?? 0) >= 1, null, { timeout: 30_000 });
    assert.equal(await page.locator('#chart-requests canvas').count(), 1, 'the requests chart is drawn');
    assert.equal(await page.locator('#chart-latency canvas').count(), 1, 'the latency chart is drawn');
    await page.waitForSelector('.coldstart .phase', { timeout: 30_000 });
    assert.match(await page.locator('#totals').textContent() ?? '', /1 cold start/);
    await page.screenshot({ path: path.join(ARTEFACTS, 'console-function.png'), fullPage: true });

    for (const [hash, heading] of [
      ['#/jobs', 'Jobs'],
      ['#/usage', 'Usage, last 30 days'],
    ]) {
      await page.goto(`${p.url}/console${hash}`);
      await page.waitForSelector(`h2:text-is("${heading}")`);
      await page.waitForSelector('table, p.muted');
    }
    assert.match(await page.locator('main').textContent() ?? '', /tiny/, 'the usage page shows the run');
    await page.close();
    assert.deepEqual(errors, []);
  });

  it('reads each chart\'s axes whole, with their units: seconds over 1,000 ms, counts in whole steps', async () => {
    const d = await tenantWithKey(p, 'console-d');
    const client = new EmbersClient({ url: p.url, apiKey: d.key });
    await deployFile(client, fixture('sleepy.ts'));
    for (const ms of [1200, 1800, 2500]) await client.call('POST', '/v1/run/sleepy', { ms });

    const page = await signedIn(d.key);
    await page.goto(`${p.url}/console#/functions/sleepy`);
    // The runs reach the per-minute roll-ups; the page reads them every 10 s, and draws the charts
    // from the same answer as the totals.
    await page.waitForFunction(() => Number(document.querySelector('#totals')?.getAttribute('data-requests') ?? 0) >= 3, null, { timeout: 30_000 });
    const latency = await axesOf(page, 'chart-latency');
    const ms = yValues(latency, 'ms', 'latency');
    assert.ok(latency.y.every((l) => l.endsWith(' s')), `latency over 1,000 ms reads in seconds: ${JSON.stringify(latency.y)}`);
    assert.ok(Math.max(...ms) >= 1000, `latency's top label reaches 1 s: ${JSON.stringify(latency.y)}`);
    for (const id of ['chart-requests', 'chart-depth']) {
      const axes = await axesOf(page, id);
      assert.ok(yValues(axes, '', id).every(Number.isInteger), `${id} counts in whole steps: ${JSON.stringify(axes.y)}`);
    }
    for (const id of ['chart-requests', 'chart-latency', 'chart-depth']) {
      const { x } = await axesOf(page, id);
      assert.ok(x.length >= 2 && x.every((l) => /^\d{2}:\d{2}$/.test(l)), `${id}'s time axis reads hours and minutes: ${JSON.stringify(x)}`);
    }
    await page.screenshot({ path: path.join(ARTEFACTS, 'console-axes.png'), fullPage: true });

    await page.goto(`${p.url}/console#/usage`);
    await page.waitForSelector('h2:text-is("Usage, last 30 days")');
    await page.waitForSelector('td:text-is("sleepy")');
    const requests = await axesOf(page, 'chart-usage-requests');
    assert.ok(yValues(requests, '', 'requests per day').every(Number.isInteger), `requests per day count in whole steps: ${JSON.stringify(requests.y)}`);
    const compute = yValues(await axesOf(page, 'chart-compute'), 's', 'compute per day');
    assert.ok(Math.max(...compute) >= 5, `compute reaches the runs' 5.5 s: ${compute}`);
    yValues(await axesOf(page, 'chart-cost'), '', 'cost per day');
    for (const id of ['chart-usage-requests', 'chart-compute', 'chart-cost']) {
      const { x } = await axesOf(page, id);
      assert.ok(x.length >= 2 && x.every((l) => /^\d{1,2} [A-Z][a-z]{2,3}$/.test(l)), `${id}'s time axis reads days: ${JSON.stringify(x)}`);
    }
    await page.screenshot({ path: path.join(ARTEFACTS, 'console-usage.png'), fullPage: true });
    await page.close();
    assert.deepEqual(errors, []);
  });

  it('never shows one tenant\'s functions to another', async () => {
    const page = await signedIn(b.key);
    await page.waitForSelector('a.fn');
    assert.deepEqual(await page.locator('a.fn').allTextContents(), ['echo']);
    expected = /status of 404/;
    await page.goto(`${p.url}/console#/functions/tiny`);
    await page.waitForSelector('text=No function "tiny" for this key.');
    expected = null;
    assert.doesNotMatch(await page.locator('main').textContent() ?? '', /classes|Last hour/);
    await page.goto(`${p.url}/console#/usage`);
    await page.waitForSelector('h2:text-is("Usage, last 30 days")');
    await page.waitForSelector('table, p.muted');
    assert.doesNotMatch(await page.locator('main').textContent() ?? '', /tiny/);
    await page.screenshot({ path: path.join(ARTEFACTS, 'console-other-tenant.png'), fullPage: true });
    await page.close();
    assert.deepEqual(errors, []);
  });

  it('lists the functions a function called and was called by in the last hour, its tenant\'s only', async () => {
    const c = await tenantWithKey(p, 'console-c');
    const client = new EmbersClient({ url: p.url, apiKey: c.key });
    await deployFile(client, fixture('upper.ts'));
    await deployFile(client, fixture('caller.ts'));
    assert.deepEqual(await client.call('POST', '/v1/run/caller', { mode: 'route', op: 'upper', text: 'x' }), { by: 'upper', result: { text: 'X' } });
    // Edges the lists must not show: another tenant's function, and a call over an hour ago.
    const redis = p.redis();
    const [caller, upper] = [qualifiedName(c.id, 'caller'), qualifiedName(c.id, 'upper')];
    await redis.zadd(keys.callsIn(upper), Date.now(), qualifiedName(b.id, 'echo'));
    await redis.zadd(keys.callsIn(caller), Date.now() - 2 * 3600_000, upper);
    type Detail = { calls: { out: { name: string; lastAt: string }[]; in: { name: string; lastAt: string }[] } };
    const shown = (name: string) => client.call<Detail>('GET', `/v1/functions/${name}`).then((d) => d.calls);
    const callerCalls = await eventually(async () => {
      const calls = await shown('caller');
      return calls.out.length > 0 && calls;
    }, 'the call edge');
    assert.deepEqual(callerCalls.out.map((e) => e.name), ['upper']);
    assert.deepEqual(callerCalls.in, []);
    assert.ok(Date.now() - Date.parse(callerCalls.out[0].lastAt) < 60_000, `lastAt ${callerCalls.out[0].lastAt} is recent`);
    const upperCalls = await shown('upper');
    assert.deepEqual([upperCalls.out, upperCalls.in.map((e) => e.name)], [[], ['caller']]);

    const page = await signedIn(c.key);
    await page.goto(`${p.url}/console#/functions/caller`);
    await page.waitForSelector('#calls-out a.fn:text-is("upper")');
    assert.match(await page.locator('#calls-out').textContent() ?? '', /^Calls: upper \d+ s ago$/);
    assert.equal(await page.locator('#calls-in').textContent(), 'Called by: none');
    await page.screenshot({ path: path.join(ARTEFACTS, 'console-calls.png'), fullPage: true });
    await page.click('#calls-out a.fn');
    await page.waitForSelector('#calls-in a.fn:text-is("caller")');
    assert.match(await page.locator('#calls-in').textContent() ?? '', /^Called by: caller \d+ s ago$/);
    assert.equal(await page.locator('#calls-out').textContent(), 'Calls: none');
    await page.close();
    assert.deepEqual(errors, []);

    const show = await new Promise<{ stdout: string; stderr: string }>((resolve, reject) =>
      execFile(process.execPath, [path.join(ROOT, 'cli/bin.mjs'), 'functions', 'show', 'caller'], { env: { ...process.env, EMBERS_URL: p.url, EMBERS_API_KEY: c.key }, timeout: 60_000 }, (err, stdout, stderr) => (err ? reject(new Error(`${err.message}\n${stderr}`)) : resolve({ stdout, stderr }))),
    );
    assert.match(show.stdout, /^calls \(last hour\): upper \(\d+ s ago\)$/m);
    assert.doesNotMatch(show.stdout, /called by/);
  });

  it('lets the admin key look at any tenant', async () => {
    const page = await signedIn(p.adminKey);
    await page.selectOption('#tenant', a.id);
    await page.waitForSelector('a.fn:text-is("tiny")');
    await page.selectOption('#tenant', b.id);
    await page.waitForSelector('a.fn:text-is("echo")');
    await page.close();
    assert.deepEqual(errors, []);
  });
});
