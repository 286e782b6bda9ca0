// `embers tail` on the real platform: a request's ctx.log line and summary reach the tail, and so
// do a starting replica's setup lines; the filters apply, another tenant cannot tail the function,
// a chatty handler leaves the stream capped and its reader told what was dropped, and functions
// nobody tails write nothing.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { readEvents, type ServerEvent } from '../../cli/sse.ts';
import { keys } from '../../core/keys.ts';
import { TAIL_MAX_LINES, type TailLine, type TailLogLine } from '../../core/tail.ts';
import { eventually, fixture, ROOT, shipped, startTestPlatform, tenantWithKey, type TestPlatform } from '../helpers/platform.ts';

let p: TestPlatform;
const tails: AbortController[] = [];

before(async () => {
  p = await startTestPlatform({ EMBERS_SCHEDULER_TICK_MS: '100' });
  await p.deploy(fixture('chatty.ts'));
  await p.deploy(shipped('echo.ts'));
});
after(async () => {
  for (const t of tails) t.abort();
  await p.close();
});

const run = async (fn: string, input: unknown) => {
  const res = await p.fetch(`/v1/run/${fn}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(input) });
  await res.arrayBuffer();
  return { status: res.status, rid: res.headers.get('x-request-id')! };
};

/** A tail read in the background: its events so far, and a wait for one. */
async function openTail(query = '') {
  const stop = new AbortController();
  tails.push(stop);
  const res = await p.fetch(`/v1/functions/chatty/tail${query}`, { signal: stop.signal });
  assert.equal(res.status, 200, await (res.status === 200 ? '' : res.text()));
  const events: ServerEvent[] = [];
  void (async () => {
    for await (const e of readEvents(res.body!)) events.push(e);
  })().catch(() => {});
  const lines = () => events.filter((e) => e.event === 'log' || e.event === 'request').map((e) => JSON.parse(e.data) as TailLine);
  const find = (what: string, match: (l: TailLine) => boolean) => eventually(async () => lines().find(match), what, 15_000);
  await eventually(async () => events.some((e) => e.event === 'tailing'), 'the tail to start');
  return { events, lines, find, stop: () => stop.abort() };
}

describe('embers tail', () => {
  test('a function nobody tails writes nothing to its tail', async () => {
    assert.equal((await run('chatty', { say: 'nobody listens' })).status, 200);
    assert.equal(await p.redis().exists(keys.tail('chatty')), 0);
  });

  test('shows a request\'s ctx.log line and its summary, and leaves other functions untailed', async () => {
    const tail = await openTail();
    const { rid } = await run('chatty', { say: 'hello tail' });
    const log = await tail.find('the log line', (l) => l.type === 'log' && l.msg === 'hello tail');
    assert.equal(log.type, 'log');
    assert.equal(log.rid, rid);
    assert.equal(log.level, 'info');
    assert.deepEqual(log.fields, { mood: 'cheerful' });
    assert.equal(log.version, 'v1');
    const summary = await tail.find('the summary line', (l) => l.type === 'request' && l.rid === rid);
    assert.equal(summary.type, 'request');
    assert.equal(summary.status, 200);
    assert.equal(summary.kind, 'sync');
    assert.equal(summary.cold, false);
    assert.equal(summary.version, 'v1');
    assert.ok(summary.ms >= 0);
    // Nothing of its input or output: only the summary's own fields.
    assert.deepEqual(Object.keys(summary).sort(), ['cold', 'kind', 'ms', 'queueMs', 'replica', 'rid', 'status', 'time', 'type', 'version']);

    const job = await p.fetch('/v1/run/chatty', { method: 'POST', headers: { prefer: 'respond-async' }, body: JSON.stringify({ say: 'later' }) });
    assert.equal(job.status, 202);
    await tail.find('an async summary', (l) => l.type === 'request' && l.kind === 'async');

    assert.equal((await run('echo', { hi: 1 })).status, 200);
    assert.equal(await p.redis().exists(keys.tail('echo')), 0);
    tail.stop();
  });

  test('filters by status, search and version; another tenant gets 404', async () => {
    const errors = await openTail('?status=error');
    const searched = await openTail('?search=needle');
    const v1 = await openTail('?version=v1&status=422');
    const all = await openTail();
    await run('chatty', { say: 'haystack ok' });
    const bad = await run('chatty', { say: 'needle bad', fail: true });
    assert.equal(bad.status, 422);
    await all.find('the failed summary', (l) => l.type === 'request' && l.rid === bad.rid);

    await errors.find('the failed summary', (l) => l.type === 'request' && l.rid === bad.rid);
    assert.deepEqual(errors.lines().map((l) => (l.type === 'log' ? l.msg : l.status)), ['needle bad', 422]);
    await searched.find('the failed summary', (l) => l.type === 'request' && l.rid === bad.rid);
    assert.deepEqual(searched.lines().map((l) => (l.type === 'log' ? l.msg : l.status)), ['needle bad', 422]);
    await v1.find('the failed summary', (l) => l.type === 'request' && l.rid === bad.rid);
    assert.deepEqual(v1.lines().map((l) => l.rid), [bad.rid, bad.rid]);

    const bravo = await tenantWithKey(p, 'bravo');
    const other = await p.fetch('/v1/functions/chatty/tail', { headers: { authorization: `Bearer ${bravo.key}` } });
    assert.equal(other.status, 404);
    assert.equal(((await other.json()) as { error: { code: string } }).error.code, 'function_not_found');
    assert.equal((await p.fetch('/v1/functions/chatty/tail?status=fine')).status, 400);
    for (const t of [errors, searched, v1, all]) t.stop();
  });

  test('a chatty handler: the stream stays capped and the reader is told what was dropped', async () => {
    const tail = await openTail();
    const { rid, status } = await run('chatty', { lines: 12_000, spreadMs: 1_500 });
    assert.equal(status, 200);
    await tail.find('the chatty summary', (l) => l.type === 'request' && l.rid === rid);
    const dropped = () => tail.events.filter((e) => e.event === 'dropped').reduce((sum, e) => sum + (JSON.parse(e.data) as { count: number }).count, 0);
    const logs = () => tail.lines().filter((l) => l.type === 'log' && l.rid === rid).length;
    // Every line is either shown or counted; a reader's skipped lines are told as it catches up.
    await eventually(async () => logs() + dropped() >= 12_000, `every line shown or counted (${logs()} shown, ${dropped()} dropped)`, 15_000).catch(() => {});
    assert.ok(dropped() > 0, 'some lines were dropped');
    assert.ok(logs() > 0);
    assert.equal(logs() + dropped(), 12_000);
    // MAXLEN ~ trims whole nodes of entries: the count may pass the cap by one node's worth.
    assert.ok((await p.redis().xlen(keys.tail('chatty'))) <= TAIL_MAX_LINES + 200);
    tail.stop();
  });

  test('embers tail prints log and summary lines, and ends on Ctrl-C', async () => {
    const cli = spawn(process.execPath, [path.join(ROOT, 'cli/bin.mjs'), 'tail', 'chatty', '--search', 'from the cli'], { env: { ...process.env, EMBERS_URL: p.url, EMBERS_API_KEY: p.apiKey }, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    cli.stdout.on('data', (b: Buffer) => (out += b.toString()));
    cli.stderr.on('data', (b: Buffer) => (err += b.toString()));
    const exited = new Promise<number | null>((resolve) => cli.on('exit', (code) => resolve(code)));
    await eventually(async () => err.includes('tailing chatty'), 'the CLI to start tailing', 15_000);
    const { rid } = await run('chatty', { say: 'hello from the cli' });
    await eventually(async () => out.includes('═════'), 'the summary line', 15_000);
    const [log, summary] = out.trim().split('\n');
    assert.match(log, new RegExp(`^\\d\\d:\\d\\d:\\d\\d\\.\\d{3} INFO  ${rid}  hello from the cli \\{"mood":"cheerful"\\}$`));
    assert.match(summary, new RegExp(`${rid}  200 ok in .* ms \\(queued .* ms\\) · v1 · sync$`));
    cli.kill('SIGINT');
    assert.equal(await exited, 0);
  });

  test('shows the setup lines of a replica that starts while the function is tailed', async () => {
    const tail = await openTail();
    // A new secret rolls the function to a new version, whose replica starts while it is tailed.
    const put = await p.fetch('/v1/functions/chatty/secrets/GREETING', { method: 'PUT', body: 'hello' });
    assert.equal(put.status, 201, await put.clone().text());
    const { version } = (await put.json()) as { version: string };
    await eventually(async () => {
      const res = await p.fetch('/v1/run/chatty', { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
      await res.arrayBuffer();
      return res.headers.get('embers-version') === version;
    }, `${version} answering`);
    const setup = await tail.find('the setup line', (l) => l.type === 'log' && l.phase === 'setup' && l.version === version);
    assert.equal(setup.type, 'log');
    assert.deepEqual([setup.msg, setup.fields, setup.level, setup.rid], ['chatty is ready to talk', { greeting: 'set' }, 'info', undefined]);
    tail.stop();
  });

  test('a setup that fails: its error line, then where the start failed, reach a tail of errors', async () => {
    const tail = await openTail('?status=error');
    // Last: chatty's setup refuses this greeting, so its replicas fail to start from here on.
    const put = await p.fetch('/v1/functions/chatty/secrets/GREETING', { method: 'PUT', body: 'refuse' });
    assert.equal(put.status, 200, await put.clone().text());
    const { version } = (await put.json()) as { version: string };
    void run('chatty', {});
    const isSaid = (l: TailLine) => l.type === 'log' && l.version === version && l.msg === 'chatty will not talk today';
    const isFailed = (l: TailLine) => l.type === 'log' && l.version === version && l.msg.startsWith('replica failed to start');
    const said = (await tail.find('the setup\'s error line', isSaid)) as TailLogLine;
    const failed = (await tail.find('the failed start', isFailed)) as TailLogLine;
    assert.deepEqual([said.phase, said.level, failed.phase, failed.level], ['setup', 'error', 'setup', 'error']);
    assert.equal(failed.msg, 'replica failed to start in setup: no greeting for you');
    assert.ok(tail.lines().findIndex(isSaid) < tail.lines().findIndex(isFailed), 'what setup logged comes first');
    assert.ok(!tail.lines().some((l) => l.type === 'log' && l.level === 'info'), 'a status filter of error shows no info line');
    tail.stop();
  });
});
