import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { MAX_CHUNK_BYTES, SEND_WINDOW, UNREAD_MAX } from '../../core/chunks.ts';
import { ChunkSink } from '../../runtime/replica/chunk-sink.ts';

const tick = () => new Promise((r) => setImmediate(r));

/** A sink over a fake stream: `unread` is what its reader has not taken. */
function sink(kept: boolean) {
  const state = { writes: [] as string[][], unread: 0, credits: [] as number[], failed: undefined as string | undefined, seq: 0, failWrites: false };
  const s = new ChunkSink({
    kept,
    write: async (data) => {
      if (state.failWrites) throw new Error('Redis is gone');
      state.writes.push(data);
      state.seq += data.length;
      state.unread += data.length;
      return { last: state.seq, length: state.unread };
    },
    unread: async () => state.unread,
    credit: (k) => state.credits.push(k),
    fail: (code, why) => (state.failed = `${code}: ${why}`),
  });
  return { s, state };
}

describe('a replica taking a streaming run\'s chunks', () => {
  it('writes the chunks of one message in one call, then gives their credit back', async () => {
    const { s, state } = sink(false);
    for (const d of ['1', '2', '3']) s.take(d);
    await tick();
    assert.deepEqual(state.writes, [['1', '2', '3']]);
    assert.deepEqual(state.credits, [3]);
    s.take('4');
    await s.close();
    assert.deepEqual(state.writes, [['1', '2', '3'], ['4']]);
    assert.equal(s.last, 4);
    assert.equal(s.count, 4);
    assert.equal(s.bytes, 4);
  });

  it('holds the credit back while the caller has UNREAD_MAX chunks unread, and gives it once it reads on', async () => {
    const { s, state } = sink(false);
    state.unread = UNREAD_MAX - 1;
    s.take('a');
    s.take('b');
    await tick();
    assert.deepEqual(state.credits, [], 'the caller has UNREAD_MAX + 1 unread');
    await new Promise((r) => setTimeout(r, 120));
    assert.deepEqual(state.credits, []);
    state.unread = 3;
    await new Promise((r) => setTimeout(r, 120));
    assert.deepEqual(state.credits, [2]);
    await s.close();
  });

  it('a job\'s chunks are kept, with no reader to wait for', async () => {
    const { s, state } = sink(true);
    state.unread = 10 * UNREAD_MAX;
    s.take('a');
    await tick();
    assert.deepEqual(state.credits, [1]);
    await s.close();
  });

  it('stops a run whose user code sends past its window or sends what is not a chunk', async () => {
    const over = sink(false);
    over.state.unread = UNREAD_MAX;
    for (let i = 0; i <= SEND_WINDOW; i++) over.s.take(String(i));
    assert.match(over.state.failed!, /^invalid_answer: .*more than 8 chunks ahead/);
    for (const bad of [42, '', 'x'.repeat(MAX_CHUNK_BYTES + 1), null]) {
      const { s, state } = sink(false);
      s.take(bad);
      assert.match(state.failed!, /^invalid_answer: .*not JSON text/, String(bad).slice(0, 10));
    }
    const broken = sink(false);
    broken.state.failWrites = true;
    broken.s.take('a');
    await broken.s.close();
    assert.match(broken.state.failed!, /^stream_failed: .*Redis is gone/);
    broken.s.take('b');
    assert.deepEqual(broken.state.writes, []);
  });
});
