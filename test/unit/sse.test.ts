import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { EventParser, readEvents } from '../../cli/sse.ts';
import { resumeAfter } from '../../core/chunks.ts';
import type { ReplyHeader } from '../../core/contracts.ts';
import { acceptsEventStream, answerAsChunk, errorOf, finalEvent, sseEvent } from '../../gateway/sse.ts';

const header = (status: number, more: Partial<ReplyHeader> = {}): ReplyHeader => ({ rid: 'r', status, replica: 'x', timing: { queueMs: 1, handlerMs: 5, inferMs: 0, batchMs: 0, execMs: 0, inputMs: 5, outputMs: 0 }, ...more });

describe('Server-Sent Events', () => {
  it('writes id, event and data; data with line breaks cannot end the event or forge another', () => {
    assert.equal(sseEvent({ id: 3, event: 'chunk', data: '{"i":3}' }), 'id: 3\nevent: chunk\ndata: {"i":3}\n\n');
    assert.equal(sseEvent({ event: 'done', data: '{}' }), 'event: done\ndata: {}\n\n');
    const forged = sseEvent({ id: 1, event: 'chunk', data: 'a\n\nevent: done\r\ndata: x\ry' });
    const events = [...new EventParser().push(forged)];
    assert.equal(events.length, 1);
    assert.deepEqual(events[0], { id: '1', event: 'chunk', data: 'a\n\nevent: done\ndata: x\ny' });
  });

  it('reads events however the text is cut, skipping comments', async () => {
    const text = `: keep-alive\n\n${sseEvent({ id: 1, event: 'chunk', data: '{"a":1}' })}${sseEvent({ event: 'done', data: '{"status":200}' })}data: plain\r\n\r\n`;
    for (const size of [1, 2, 7, text.length]) {
      const parts: Uint8Array[] = [];
      for (let i = 0; i < text.length; i += size) parts.push(new TextEncoder().encode(text.slice(i, i + size)));
      const out = [];
      for await (const e of readEvents((async function* () { yield* parts; })())) out.push(e);
      assert.deepEqual(out, [{ id: '1', event: 'chunk', data: '{"a":1}' }, { event: 'done', data: '{"status":200}' }, { event: 'message', data: 'plain' }], `cut every ${size}`);
    }
  });

  it('knows a caller asking for events', () => {
    assert.equal(acceptsEventStream('text/event-stream'), true);
    assert.equal(acceptsEventStream('application/json, Text/Event-Stream;q=0.5'), true);
    assert.equal(acceptsEventStream('text/event-stream;q=0'), false);
    assert.equal(acceptsEventStream('*/*'), false);
    assert.equal(acceptsEventStream(undefined), false);
  });

  it('ends with done (status, timing, Server-Timing) or error (with the error)', () => {
    const [done] = [...new EventParser().push(finalEvent(header(200, { cold: { waitedMs: 12, phases: {} as never } }), Buffer.from('null'), 9.123))];
    assert.equal(done.event, 'done');
    const d = JSON.parse(done.data) as { status: number; timing: { totalMs: number; coldMs: number; handlerMs: number }; serverTiming: string };
    assert.equal(d.status, 200);
    assert.equal(d.timing.totalMs, 9.12);
    assert.equal(d.timing.coldMs, 12);
    assert.match(d.serverTiming, /^cold;dur=12, queue;dur=1, .*handler;dur=5, total;dur=9.12$/);
    const [err] = [...new EventParser().push(finalEvent(header(504), Buffer.from('{"error":{"code":"timeout","message":"too slow"}}'), 1))];
    assert.equal(err.event, 'error');
    assert.deepEqual((JSON.parse(err.data) as { error: unknown }).error, { code: 'timeout', message: 'too slow' });
    assert.deepEqual(errorOf('not json'), { code: 'error', message: 'not json' });
  });

  it('a returned answer as one chunk: its JSON, or its bytes as { contentType, base64 }', () => {
    assert.equal(answerAsChunk(header(200), Buffer.from('{"a":1}')), '{"a":1}');
    assert.deepEqual(JSON.parse(answerAsChunk(header(200, { type: 'image/png' }), Buffer.from([1, 2]))), { contentType: 'image/png', base64: 'AQI=' });
  });

  it('resumes after a Last-Event-ID it gave out, and refuses any other', () => {
    assert.equal(resumeAfter(undefined), 0);
    assert.equal(resumeAfter(''), 0);
    assert.equal(resumeAfter(' 42 '), 42);
    assert.equal(resumeAfter('chunk-3'), undefined);
    assert.equal(resumeAfter('-1'), undefined);
    assert.equal(resumeAfter('1e3'), undefined);
  });
});
