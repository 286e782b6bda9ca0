import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { MAX_CHUNK_BYTES, SEND_WINDOW } from '../../core/chunks.ts';
import { HandlerStreams, isChunkSource, StreamedAnswer } from '../../runtime/user-code/handler-stream.ts';
import { AnswerTooLargeError, ChunkTooLargeError, writeTypedArraysAsJson } from '../../runtime/user-code/result-body.ts';
import { binary } from '../../sdk/index.ts';

writeTypedArraysAsJson();

const MAX = 16 * 1024 * 1024;
const tick = () => new Promise((r) => setImmediate(r));

/** A generator of `n` numbered chunks that counts what it yielded and whether it was told to return. */
function counting(n: number) {
  const seen = { yielded: 0, returned: false };
  async function* gen() {
    try {
      for (let i = 1; i <= n; i++) {
        seen.yielded++;
        yield { i };
      }
    } finally {
      seen.returned = true;
    }
  }
  return { seen, source: gen() };
}

describe('a handler that yields, in the user-code process', () => {
  it('tells chunk sources from answers', () => {
    assert.equal(isChunkSource((async function* () {})()), true);
    assert.equal(isChunkSource(new ReadableStream()), true);
    assert.equal(isChunkSource({ a: 1 }), false);
    assert.equal(isChunkSource([1, 2]), false);
    assert.equal(isChunkSource('text'), false);
    assert.equal(isChunkSource(Buffer.from('x')), false);
  });

  it('gathers the chunks as a JSON array when nothing is sent, bytes as { contentType, base64 }', async () => {
    const streams = new HandlerStreams(() => assert.fail('nothing is sent'));
    async function* gen() {
      yield { a: new Float32Array([0.5]) };
      yield binary(Buffer.from([1, 2]), 'image/png');
      yield 'text';
    }
    const out = await streams.drain(gen(), { n: 1 }, new AbortController().signal, MAX);
    assert.ok(out instanceof StreamedAnswer);
    assert.equal(out.count, 3);
    assert.deepEqual(JSON.parse(out.json!), [{ a: [0.5] }, { contentType: 'image/png', base64: 'AQI=' }, 'text']);
    assert.equal((await streams.drain((async function* () {})(), { n: 2 }, new AbortController().signal, MAX)).json, '[]');
  });

  it('sends at most SEND_WINDOW chunks ahead of the credit: past that the generator is not pulled', async () => {
    const sent: string[] = [];
    const streams = new HandlerStreams((n, data) => {
      assert.equal(n, 7);
      sent.push(data);
    });
    const { seen, source } = counting(50);
    const done = streams.drain(source, { n: 7, streamTo: 'caller' }, new AbortController().signal, MAX);
    for (let i = 0; i < 5; i++) await tick();
    assert.equal(sent.length, SEND_WINDOW);
    assert.equal(seen.yielded, SEND_WINDOW);
    streams.credit(7, 3);
    for (let i = 0; i < 5; i++) await tick();
    assert.equal(sent.length, SEND_WINDOW + 3);
    streams.credit(99, 100);
    for (let i = 0; i < 50; i++) {
      streams.credit(7, SEND_WINDOW);
      await tick();
    }
    const out = await done;
    assert.equal(out.json, undefined, 'a caller\'s chunks are sent, not gathered');
    assert.equal(out.count, 50);
    assert.deepEqual(sent.map((d) => JSON.parse(d).i), Array.from({ length: 50 }, (_, i) => i + 1));
  });

  it('a job\'s chunks are sent and gathered', async () => {
    const sent: string[] = [];
    const streams = new HandlerStreams((_, d) => sent.push(d));
    const { source } = counting(3);
    const out = await streams.drain(source, { n: 1, streamTo: 'job' }, new AbortController().signal, MAX);
    assert.equal(sent.length, 3);
    assert.equal(out.json, '[{"i":1},{"i":2},{"i":3}]');
  });

  it('stops pulling when its signal aborts, waiting for credit or not, and tells the generator to return', async () => {
    const streams = new HandlerStreams(() => {});
    const ctl = new AbortController();
    const { seen, source } = counting(100);
    const done = streams.drain(source, { n: 1, streamTo: 'caller' }, ctl.signal, MAX);
    await tick();
    ctl.abort(new Error('caller gone'));
    await assert.rejects(done, /caller gone/);
    await tick();
    assert.equal(seen.yielded, SEND_WINDOW);
    assert.equal(seen.returned, true);

    // Aborted while the generator is stuck in an await: not waited for.
    const stuck = new AbortController();
    async function* never() {
      yield 1;
      await new Promise(() => {});
    }
    const pending = streams.drain(never(), { n: 2 }, stuck.signal, MAX);
    await tick();
    stuck.abort(new Error('timeout'));
    await assert.rejects(pending, /timeout/);
  });

  it('bounds each chunk, and the chunks gathered by the answer limit', async () => {
    const streams = new HandlerStreams(() => {});
    async function* big() {
      yield 'x'.repeat(MAX_CHUNK_BYTES);
    }
    await assert.rejects(streams.drain(big(), { n: 1 }, new AbortController().signal, MAX), ChunkTooLargeError);
    const { seen, source } = counting(10_000);
    await assert.rejects(streams.drain(source, { n: 2 }, new AbortController().signal, 100), AnswerTooLargeError);
    assert.ok(seen.yielded < 20, 'it stopped at the bound');
    await tick();
    assert.equal(seen.returned, true);
  });
});
