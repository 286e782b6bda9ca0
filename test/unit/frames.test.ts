// The channel's frames: split anywhere across chunks, a bytes frame into a buffer of its own; a stream that
// breaks its bounds stops. And the replica's reader of the user-code side, which takes nothing on trust.
import assert from 'node:assert/strict';
import { PassThrough, Writable } from 'node:stream';
import { describe, it } from 'node:test';
import { BYTES, FrameReader, MESSAGES, writeFrame, writeMessages, type FrameKind } from '../../runtime/channel/frames.ts';
import { Bucket, checkStats, LOG_MESSAGES_PER_S, shapeProblem, UserCodeReader } from '../../runtime/replica/user-code-channel.ts';
import type { FromUserCode } from '../../runtime/channel/messages.ts';

const wire = (write: (out: PassThrough) => void) => {
  const out = new PassThrough();
  const chunks: Buffer[] = [];
  out.on('data', (c: Buffer) => chunks.push(c));
  write(out);
  return Buffer.concat(chunks);
};
const tick = () => new Promise((r) => setImmediate(r));

describe('FrameReader', () => {
  it('writes a messages frame in one write, and a bytes frame in one gathered write on a socket', async () => {
    const writes: number[] = [];
    const out = new PassThrough();
    out.on('data', (c: Buffer) => writes.push(c.length));
    writeMessages(out, [{ type: 'standby' }]);
    await tick();
    assert.deepEqual(writes, [9 + JSON.stringify([{ type: 'standby' }]).length]);
    const gathered: number[] = [];
    const socket = new Writable({ writev: (chunks, done) => (gathered.push(chunks.length), done()), write: (_c, _e, done) => (gathered.push(1), done()) });
    writeFrame(socket, BYTES, 1, Buffer.alloc(1000));
    await tick();
    assert.deepEqual(gathered, [2], 'header and bytes in one writev, not copied together');
  });

  it('hands on each frame, split across chunks at every point, a bytes frame in a buffer of its own', async () => {
    const a = Buffer.from('first frame');
    const b = Buffer.alloc(100_000, 7);
    const bytes = wire((out) => {
      writeFrame(out, BYTES, 1, a);
      writeFrame(out, BYTES, 2, Buffer.alloc(0));
      writeMessages(out, [{ type: 'standby' }, { type: 'stats', stats: {} }]);
      writeFrame(out, BYTES, 3, b);
    });
    for (const size of [1, 3, 9, 10, 64, bytes.length]) {
      const stream = new PassThrough();
      const got: [FrameKind, number, Buffer][] = [];
      new FrameReader(stream, { maxBytes: { [MESSAGES]: 1 << 20, [BYTES]: 1 << 20 }, onFrame: (k, n, f) => got.push([k, n, f]), onCorrupt: (why) => assert.fail(why) });
      for (let at = 0; at < bytes.length; at += size) stream.write(bytes.subarray(at, at + size));
      await tick();
      assert.deepEqual(got.map(([k, n, f]) => [k, n, f.length]), [[BYTES, 1, a.length], [BYTES, 2, 0], [MESSAGES, 0, 48], [BYTES, 3, b.length]]);
      assert.deepEqual(JSON.parse(got[2][2].toString()), [{ type: 'standby' }, { type: 'stats', stats: {} }]);
      assert.equal(got[3][2].byteOffset, 0, 'a frame has a buffer of its own (tensor views are aligned)');
    }
  });

  it('stops at a frame over its bound and at an unknown kind, before reading its body', async () => {
    for (const [frame, expect] of [
      [wire((out) => writeFrame(out, BYTES, 1, Buffer.alloc(11))), /sent a frame of 11 bytes, over its bound of 10/],
      [Buffer.from([9, 0, 0, 0, 0, 255, 255, 255, 255]), /unknown kind 9/],
      [Buffer.from([MESSAGES, 0, 0, 0, 0, 255, 255, 255, 255]), /4294967295 bytes, over its bound of 10/],
    ] as const) {
      const stream = new PassThrough();
      let why = '';
      new FrameReader(stream, { maxBytes: { [MESSAGES]: 10, [BYTES]: 10 }, onFrame: () => assert.fail('read'), onCorrupt: (w) => (why = w) });
      stream.write(frame);
      await tick();
      assert.match(why, expect);
    }
  });
});

describe('UserCodeReader', () => {
  const reader = (o: { expects?: (n: number) => boolean; now?: () => number } = {}) => {
    const stream = new PassThrough();
    const seen = { messages: [] as FromUserCode[], bytes: [] as number[], violations: [] as string[] };
    new UserCodeReader(stream, {
      maxBytesFrame: 1024,
      expectsBytes: o.expects ?? (() => true),
      onBytes: (n) => seen.bytes.push(n),
      onMessage: (m) => seen.messages.push(m),
      onViolation: (why) => seen.violations.push(why),
      now: o.now,
    });
    const send = async (write: (out: PassThrough) => void) => {
      stream.write(wire(write));
      await tick();
    };
    return { stream, seen, send };
  };

  it('hands on well-formed messages of known types', async () => {
    const r = reader();
    await r.send((out) => writeMessages(out, [{ type: 'standby' }, { type: 'result', n: 1, status: 200, body: '{}', timing: {} }, { type: 'log', n: 0, dropped: 3 }]));
    assert.deepEqual(r.seen.messages.map((m) => m.type), ['standby', 'result', 'log']);
    assert.deepEqual(r.seen.violations, []);
  });

  it('ends at the first unknown type, junk, a forged announcement or bytes nobody waits for', async () => {
    for (const [write, expect] of [
      [(out: PassThrough) => writeMessages(out, [{ type: 'announce', busy: true }]), /unknown type "announce"/],
      [(out: PassThrough) => writeFrame(out, MESSAGES, 0, Buffer.from('{not json')), /not JSON/],
      [(out: PassThrough) => writeFrame(out, MESSAGES, 0, Buffer.from('[]')), /not a list of messages/],
      [(out: PassThrough) => writeMessages(out, [{ type: 'result', status: 200 }]), /without a run number/],
      [(out: PassThrough) => writeMessages(out, [{ type: 'chunk', n: 1, data: {} }]), /not JSON text/],
      [(out: PassThrough) => writeFrame(out, BYTES, 7, Buffer.from('x')), /run 7/],
    ] as const) {
      const r = reader({ expects: () => false });
      await r.send((out) => {
        write(out);
        writeMessages(out, [{ type: 'standby' }]);
      });
      assert.equal(r.seen.violations.length, 1);
      assert.match(r.seen.violations[0], expect);
      assert.deepEqual(r.seen.messages, [], 'nothing after a violation is read');
    }
  });

  it('bounds log lines a second on its own clock', async () => {
    let now = 0;
    const r = reader({ now: () => now });
    const lines = (k: number) => Array.from({ length: k }, () => ({ type: 'log', n: 0, call: { level: 'info', msg: 'a line', time: 0 } }));
    await r.send((out) => writeMessages(out, lines(LOG_MESSAGES_PER_S)));
    assert.deepEqual(r.seen.violations, []);
    now += 500;
    await r.send((out) => writeMessages(out, lines(LOG_MESSAGES_PER_S / 2)));
    assert.deepEqual(r.seen.violations, [], 'half a second refills half the budget');
    await r.send((out) => writeMessages(out, lines(1)));
    assert.match(r.seen.violations[0], /log lines faster than/);
  });

  it('does not count a count of dropped lines as a line (one may come with every answer)', async () => {
    const r = reader({ now: () => 0 });
    await r.send((out) => writeMessages(out, Array.from({ length: 2 * LOG_MESSAGES_PER_S }, () => ({ type: 'log', n: 0, dropped: 1 }))));
    assert.deepEqual(r.seen.violations, []);
  });

  it('ends a process whose message throws while it is read, instead of throwing itself', async () => {
    const r = reader();
    await r.send((out) => writeFrame(out, MESSAGES, 0, Buffer.from('[{"type":{"toString":1}}]')));
    assert.match(r.seen.violations[0], /unknown type \(a object\)/);
  });

  it('pauses the pipe past its frame budget instead of reading on', async () => {
    const r = reader({ now: () => 0 });
    await r.send((out) => {
      // Half a second of frames over the budget: the pipe waits that long.
      for (let i = 0; i < 30_000; i++) writeMessages(out, [{ type: 'standby' }]);
    });
    assert.equal(r.stream.isPaused(), true);
    assert.deepEqual(r.seen.violations, []);
  });

  it('knows the shape of each message it takes', () => {
    assert.equal(shapeProblem({ type: 'stuck', n: 3 }), undefined);
    assert.match(shapeProblem({ type: 'stuck', rid: 'x' })!, /without a run number/);
    assert.match(shapeProblem('standby')!, /not an object/);
    assert.match(shapeProblem({ type: 'peer', id: 'x' })!, /unknown type/);
  });

  it('takes a call only with a run, a call number, a name and JSON text', () => {
    assert.equal(shapeProblem({ type: 'call', n: 1, c: 1, name: 'upper', input: '{}' }), undefined);
    assert.equal(shapeProblem({ type: 'call', n: 1, c: 2, name: 'upper', input: '{}', timeoutMs: 500, stream: true }), undefined);
    assert.match(shapeProblem({ type: 'call', c: 1, name: 'upper', input: '{}' })!, /without a run number/);
    assert.match(shapeProblem({ type: 'call', n: 1, c: -1, name: 'upper', input: '{}' })!, /without a call number/);
    assert.match(shapeProblem({ type: 'call', n: 1, c: 1, name: 'x'.repeat(64), input: '{}' })!, /without a function name/);
    assert.match(shapeProblem({ type: 'call', n: 1, c: 1, name: 'upper', input: {} })!, /not JSON text/);
    assert.match(shapeProblem({ type: 'call', n: 1, c: 1, name: 'upper', input: '{}', timeoutMs: 1.5 })!, /timeout/);
    assert.match(shapeProblem({ type: 'call', n: 1, c: 1, name: 'upper', input: '{}', stream: 1 })!, /stream flag/);
    assert.equal(shapeProblem({ type: 'call_abort', c: 3 }), undefined);
    assert.equal(shapeProblem({ type: 'call_credit', c: 3, k: 1 }), undefined);
    assert.match(shapeProblem({ type: 'call_credit', c: 3, k: 0 })!, /credit/);
    assert.match(shapeProblem({ type: 'call_abort' })!, /without a call number/);
  });
});

describe('Bucket', () => {
  it('refills at its rate, up to its size, and says how long a debt takes to pay', () => {
    let now = 0;
    const b = new Bucket(10, () => now);
    assert.equal(b.take(10), true);
    assert.equal(b.take(), false);
    assert.equal(b.waitMs(), 100);
    now += 1100;
    assert.equal(b.take(10), true);
  });
});

describe('checkStats', () => {
  it('keeps only the models the process was given, and counts that are finite and not negative', () => {
    const raw = {
      liveFirst: { yields: 2, heldMs: -5 },
      gc: { count: 'many', ms: 1e400 },
      models: {
        cls: { provider: 'cpu', instances: 2, requests: -1, inferences: 'x', executions: 3, callsPerBatch: { '1': 4, '2': null }, costPerRow: { '8': { msPerRow: 0.5, samples: 3 } }, lone: { choice: 'narrow', wide: null, narrow: 1.2 }, extra: { deep: [[[1]]] } },
        invented: { requests: 1 },
      },
    };
    const s = checkStats(raw, ['cls', 'det']);
    assert.deepEqual(Object.keys(s.models), ['cls']);
    assert.deepEqual(s.liveFirst, { yields: 2, heldMs: 0 });
    assert.deepEqual(s.gc, { count: 0, ms: 0 });
    const m = s.models.cls;
    assert.deepEqual([m.requests, m.inferences, m.executions, m.instances, m.provider], [0, 0, 3, 2, 'cpu']);
    assert.deepEqual(m.callsPerBatch, { '1': 4, '2': 0 });
    assert.deepEqual(m.costPerRow, { '8': { msPerRow: 0.5, samples: 3 } });
    assert.deepEqual(m.lone, { choice: 'narrow', wide: null, narrow: 1.2 });
    assert.equal('extra' in m, false);
    assert.deepEqual(checkStats(null, ['cls']).models, {});
  });
});
