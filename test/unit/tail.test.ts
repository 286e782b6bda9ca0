// The tail's pure parts: capping lines, the user code's log calls and budget, the replica's gate
// and writer (numbering what it drops), the gateway's gaps, filters and backlog, and the CLI's formats.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { createLogger } from '../../core/log.ts';
import { capLogCall, TAIL_MAX_BYTES, TAIL_MAX_FIELDS_CHARS, TAIL_MAX_LINES, TAIL_MAX_MSG_CHARS, tailMaxLen, type TailEntry, type TailLine, type TailLogLine, type TailRequestLine } from '../../core/tail.ts';
import { LogBudget, logCall, tailedLogger } from '../../runtime/user-code/tail-log.ts';
import { TailGate, TailWriter, WRITER_MAX_PENDING } from '../../runtime/replica/tail.ts';
import { SeqGaps } from '../../gateway/tail-feed.ts';
import { HELD_MAX, TailBacklog, TailFilter, type TailItem } from '../../gateway/tail-filter.ts';
import { formatTailEvent, prettyLine } from '../../cli/tail-format.ts';

const log = (rid: string, msg: string, o: Partial<TailLogLine> = {}): TailLogLine => ({ type: 'log', time: 0, rid, level: 'info', msg, version: 'v1', replica: 'r1', ...o });
const done = (rid: string, status: number, o: Partial<TailRequestLine> = {}): TailRequestLine => ({ type: 'request', time: 0, rid, status, ms: 3, queueMs: 1, cold: false, version: 'v1', kind: 'sync', replica: 'r1', ...o });
const item = (line: TailLine): TailItem => ({ line, d: JSON.stringify(line) });
const shown = (r: { show: TailItem[] }) => r.show.map((i) => (i.line.type === 'log' ? i.line.msg : i.line.status));

describe('tail lines', () => {
  test('a log call is checked and cut to its bounds', () => {
    assert.equal(capLogCall({ level: 'loud', msg: 'x' }), undefined);
    assert.equal(capLogCall({ level: 'info', msg: 3 }), undefined);
    assert.equal(capLogCall(null), undefined);
    const long = capLogCall({ level: 'warn', msg: 'm'.repeat(TAIL_MAX_MSG_CHARS + 10), time: 5, fields: { big: 'f'.repeat(TAIL_MAX_FIELDS_CHARS) } })!;
    assert.equal(long.msg.length, TAIL_MAX_MSG_CHARS + 1);
    assert.equal(long.time, 5);
    assert.equal(Object.keys(long.fields!).join(), 'truncated');
    assert.equal((long.fields!.truncated as string).length, TAIL_MAX_FIELDS_CHARS + 1);
    // An array or empty object is no fields.
    assert.equal(capLogCall({ level: 'info', msg: '', fields: [1] })!.fields, undefined);
    assert.equal(capLogCall({ level: 'info', msg: '', fields: {} })!.fields, undefined);
  });

  test('the stream keeps fewer lines when they are long', () => {
    assert.equal(tailMaxLen(100), TAIL_MAX_LINES);
    assert.equal(tailMaxLen(8192), TAIL_MAX_BYTES / 8192);
    assert.equal(tailMaxLen(10 ** 9), 64);
  });
});

describe('the user code\'s side', () => {
  test('log calls read as pino reads them', () => {
    assert.deepEqual(logCall('info', ['hello %s', 'you'], {}), { level: 'info', msg: 'hello you', time: logCall('info', ['x'], {})!.time });
    const withFields = logCall('warn', [{ a: 1 }, 'n=%d', 4], { rid: 'r' })!;
    assert.equal(withFields.msg, 'n=4');
    assert.deepEqual(withFields.fields, { rid: 'r', a: 1 });
    const err = logCall('error', [new Error('boom')], {})!;
    assert.equal(err.msg, 'boom');
    assert.equal((err.fields!.err as { message: string }).message, 'boom');
    const errField = logCall('error', [{ err: new TypeError('bad') }, 'failed'], {})!;
    assert.equal((errField.fields!.err as { type: string }).type, 'TypeError');
    const cycle: Record<string, unknown> = {};
    cycle.self = cycle;
    assert.match(JSON.stringify(logCall('info', [cycle, 'c'], {})!.fields), /unserializable/);
  });

  test('a tailed logger sends every level and its children\'s bindings, whatever its own level', () => {
    const sent: { level: string; msg: string; fields?: object }[] = [];
    const base = createLogger('tail-test', 'silent').child({ rid: 'req_1' });
    const l = tailedLogger(base, (c) => sent.push(c));
    l.info('one');
    l.debug({ k: 2 }, 'two');
    l.child({ step: 'resize' }).warn('three');
    assert.deepEqual(sent.map((c) => [c.level, c.msg, c.fields]), [['info', 'one', undefined], ['debug', 'two', { k: 2 }], ['warn', 'three', { step: 'resize' }]]);
    assert.equal(l.level, 'silent');
  });

  test('the budget lets a burst through, then its rate', () => {
    let now = 0;
    const b = new LogBudget(10, () => now);
    let passed = 0;
    for (let i = 0; i < 50; i++) if (b.take()) passed++;
    assert.equal(passed, 10);
    now += 500;
    passed = 0;
    for (let i = 0; i < 50; i++) if (b.take()) passed++;
    assert.equal(passed, 5);
  });
});

describe('the replica\'s side', () => {
  test('the gate reads the mark at most once a second, and a nudge opens it at once', async () => {
    let now = 0;
    let reads = 0;
    let answer = true;
    const gate = new TailGate(async () => (reads++, answer), () => now);
    assert.equal(gate.on(), false);
    await Promise.resolve();
    assert.equal(gate.on(), true);
    now += 500;
    gate.on();
    assert.equal(reads, 1);
    answer = false;
    now += 600;
    gate.on();
    await Promise.resolve();
    assert.equal(reads, 2);
    assert.equal(gate.on(), false);
    gate.nudge();
    assert.equal(gate.on(), true);
    // A read begun before a nudge does not close it.
    now += 1_000;
    gate.on();
    gate.nudge();
    await Promise.resolve();
    assert.equal(gate.on(), true);
  });

  test('the writer numbers every line, written or dropped, so readers can count what was lost', async () => {
    const written: TailEntry[][] = [];
    let release!: () => void;
    const blocked = new Promise<void>((r) => (release = r));
    // While the first write is held, lines wait up to the cap; past it they are dropped and numbered.
    const w2 = new TailWriter({ replica: 'r1', version: 'v2', write: async (e) => (written.push(e), blocked) });
    w2.log('req_2', { level: 'nonsense', msg: 'not a line' });
    for (let i = 0; i < WRITER_MAX_PENDING + 10; i++) w2.log('req_2', { level: 'info', msg: `l${i}`, time: 1 });
    w2.dropped(5);
    w2.request({ rid: 'req_2', status: 200, ms: 1, queueMs: 0, cold: false, kind: 'sync' });
    release();
    await w2.flush();
    const entries = written.flat();
    assert.equal(entries.length, WRITER_MAX_PENDING + 1);
    const last = entries.at(-1)!;
    assert.equal(last.n, WRITER_MAX_PENDING + 10 + 5 + 1);
    const summary = JSON.parse(last.d) as TailRequestLine;
    assert.deepEqual([summary.type, summary.rid, summary.version, summary.replica], ['request', 'req_2', 'v2', 'r1']);
    assert.equal((JSON.parse(entries[0].d) as TailLogLine).msg, 'l0');
  });

  test('the writer tags a setup or warmup line with its phase in place of a request id', async () => {
    const written: TailEntry[] = [];
    const w = new TailWriter({ replica: 'r1', version: 'v3', write: async (e) => void written.push(...e) });
    w.startLog('setup', { level: 'info', msg: 'vocab loaded', fields: { words: 3 }, time: 5 });
    w.startLog('warmup', { level: 'bogus', msg: 'not a line' });
    await w.flush();
    assert.deepEqual(written.map((e) => JSON.parse(e.d) as TailLogLine), [{ type: 'log', level: 'info', msg: 'vocab loaded', fields: { words: 3 }, time: 5, phase: 'setup', version: 'v3', replica: 'r1' }]);
  });

  test('lines carry where their session began: the gate opening starts one', async () => {
    const written: TailEntry[] = [];
    const w = new TailWriter({ replica: 'r1', version: 'v1', write: async (e) => void written.push(...e) });
    const gate = new TailGate(async () => false, () => 0);
    gate.onOpen = () => w.session();
    w.log('a', { level: 'info', msg: 'before', time: 1 });
    w.dropped(3);
    gate.nudge();
    gate.nudge();
    w.log('a', { level: 'info', msg: 'after', time: 1 });
    await w.flush();
    assert.deepEqual(written.map((e) => [e.n, e.s]), [[1, 1], [5, 5]]);
  });
});

describe('the gateway\'s side', () => {
  test('gaps in a replica\'s numbers are lines dropped', () => {
    const g = new SeqGaps();
    assert.equal(g.gap('a', 10), 0);
    assert.equal(g.gap('a', 11), 0);
    assert.equal(g.gap('a', 15), 3);
    assert.equal(g.gap('b', 3), 0);
    assert.equal(g.gap('a', 12), 0);
    assert.equal(g.gap('a', 16), 0);
  });

  test('a replica first seen counts what it wrote since its session began, unless the stream held it when the feed began', () => {
    const g = new SeqGaps();
    // Its first 1,455 lines since someone began tailing were trimmed before this feed read them.
    assert.equal(g.gap('a', 1456, 1), 1455);
    assert.equal(g.gap('a', 1457, 1), 0);
    // Already in the stream when the feed began: lines before its newest there are not this reader's.
    g.seen('b', 40);
    assert.equal(g.gap('b', 41, 1), 0);
    assert.equal(g.gap('c', 7, 7), 0, 'its session\'s first line');
  });

  test('no filter shows everything as it comes', () => {
    const f = new TailFilter({});
    assert.deepEqual(shown(f.take([item(log('a', 'x')), item(done('a', 500))])), ['x', 500]);
  });

  test('a status filter holds log lines until their request ends, and shows those that match', () => {
    const f = new TailFilter({ status: 'error' });
    assert.deepEqual(shown(f.take([item(log('a', 'a1')), item(log('b', 'b1'))])), []);
    assert.deepEqual(shown(f.take([item(done('a', 200)), item(log('b', 'b2')), item(done('b', 503))])), ['b1', 'b2', 503]);
    assert.deepEqual(shown(new TailFilter({ status: 404 }).take([item(log('c', 'c1')), item(done('c', 404))])), ['c1', 404]);
    assert.deepEqual(shown(new TailFilter({ status: 'ok' }).take([item(done('c', 404)), item(done('d', 201))])), [201]);
  });

  test('held lines are bounded; those evicted count as dropped only if their request matches', () => {
    const f = new TailFilter({ status: 'error' });
    const lines = Array.from({ length: HELD_MAX + 5 }, (_, i) => item(log('a', `a${i}`)));
    f.take(lines);
    const failed = f.take([item(done('a', 500))]);
    assert.equal(failed.show.length, HELD_MAX + 1);
    assert.equal(failed.dropped, 5);
    const g = new TailFilter({ status: 'error' });
    g.take(lines);
    assert.deepEqual(g.take([item(done('a', 200))]), { show: [], dropped: 0 });
  });

  test('search matches a log line\'s message, fields or request id, and shows its request\'s summary', () => {
    const f = new TailFilter({ search: 'needle' });
    const r = f.take([item(log('a', 'hay')), item(log('b', 'a needle')), item(log('c', 'x', { fields: { where: 'needle' } })), item(done('a', 200)), item(done('b', 200)), item(done('c', 500)), item(done('needle-rid', 200))]);
    assert.deepEqual(r.show.map((i) => `${i.line.type}:${i.line.rid}`), ['log:b', 'log:c', 'request:b', 'request:c', 'request:needle-rid']);
  });

  test('a starting replica\'s setup and warmup lines: shown unfiltered, searched, and with status error only when they are errors', () => {
    const setup = (msg: string, level: TailLogLine['level'] = 'info') => item({ type: 'log', time: 0, phase: 'setup', level, msg, version: 'v2', replica: 'r9' });
    assert.deepEqual(shown(new TailFilter({}).take([setup('loading vocab'), item(log('a', 'x'))])), ['loading vocab', 'x']);
    assert.deepEqual(shown(new TailFilter({ status: 'error' }).take([setup('loading vocab'), setup('no licence', 'error'), item(done('a', 200))])), ['no licence']);
    assert.deepEqual(shown(new TailFilter({ status: 200 }).take([setup('no licence', 'error')])), []);
    assert.deepEqual(shown(new TailFilter({ search: 'vocab' }).take([setup('loading vocab'), setup('ready')])), ['loading vocab']);
    assert.deepEqual(shown(new TailFilter({ search: 'setup' }).take([setup('ready')])), ['ready'], 'its phase is searched as a request id is');
    assert.deepEqual(shown(new TailFilter({ version: 'v1' }).take([setup('ready')])), []);
  });

  test('version keeps only that version\'s lines', () => {
    const f = new TailFilter({ version: 'v2' });
    assert.deepEqual(shown(f.take([item(log('a', 'old')), item(log('b', 'new', { version: 'v2' })), item(done('b', 200, { version: 'v2' }))])), ['new', 200]);
  });

  test('a slow reader\'s backlog keeps the newest lines and counts those skipped', () => {
    const b = new TailBacklog(3);
    assert.equal(b.empty, true);
    b.push([1, 2].map((i) => item(log('a', `m${i}`))), 4);
    b.push([3, 4, 5].map((i) => item(log('a', `m${i}`))));
    const first = b.take(2);
    assert.deepEqual(first.items.map((i) => (i.line as TailLogLine).msg), ['m3', 'm4']);
    assert.equal(first.dropped, 6);
    assert.deepEqual(b.take(10).dropped, 0);
    assert.equal(b.empty, true);
  });
});

describe('embers tail\'s formats', () => {
  const time = new Date(2026, 0, 2, 3, 4, 5, 6).getTime();
  test('pretty: time, level, request id, message; summaries set apart, a call\'s with its parent; drops said', () => {
    assert.equal(prettyLine(log('req_1', 'hello', { time, fields: { k: 1 } })), '03:04:05.006 INFO  req_1  hello {"k":1}');
    assert.equal(prettyLine(log('req_1', 'boom', { time, level: 'error' })), '03:04:05.006 ERROR req_1  boom');
    assert.equal(prettyLine({ type: 'log', time, phase: 'setup', level: 'info', msg: 'vocab loaded', version: 'v2', replica: 'fn-v2-a1b2c3' }), '03:04:05.006 INFO  setup v2 fn-v2-a1b2c3  vocab loaded');
    assert.equal(prettyLine(done('req_1', 200, { time, ms: 12.345, queueMs: 0.25 })), '03:04:05.006 ═════ req_1  200 ok in 12 ms (queued 0.3 ms) · v1 · sync');
    assert.equal(prettyLine(done('req_2', 503, { time, cold: true, coldMs: 1500, kind: 'async', version: 'v3' })), '03:04:05.006 ═════ req_2  503 error in 3 ms (queued 1 ms) · v3 · async · cold 1500 ms');
    assert.equal(prettyLine(done('req_3.1', 200, { time, parent: 'req_3' })), '03:04:05.006 ═════ req_3.1 ← req_3  200 ok in 3 ms (queued 1 ms) · v1 · sync');
    assert.equal(formatTailEvent({ event: 'dropped', data: '{"count":7}' }, 'pretty'), '… 7 lines dropped\n');
    assert.equal(formatTailEvent({ event: 'tailing', data: '{}' }, 'pretty'), null);
  });

  test('json: one object per line with its type', () => {
    const line = log('req_1', 'hi', { time });
    assert.deepEqual(JSON.parse(formatTailEvent({ event: 'log', data: JSON.stringify(line) }, 'json')!), line);
    assert.equal(formatTailEvent({ event: 'dropped', data: '{"count":1}' }, 'json'), '{"type":"dropped","count":1}\n');
  });
});
