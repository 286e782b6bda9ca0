import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Hono } from 'hono';
import { pino } from 'pino';
import { requestId } from '../../gateway/middleware/request-id.ts';

describe('request ids and the request line', () => {
  it('logs one line per request with its id, and the gateway’s other lines stay redacted', async () => {
    const lines: Record<string, unknown>[] = [];
    const log = pino({ redact: { paths: ['*.authorization'], censor: '[redacted]' } }, { write: (l: string) => void lines.push(JSON.parse(l)) });
    const app = new Hono();
    app.onError((_err, c) => c.text('failed', 500));
    app.use('*', requestId(log));
    app.post('/v1/run/:name', (c) => c.json({ ok: true }, 201));
    app.get('/bad', () => {
      throw new Error('boom');
    });
    const res = await app.request('/v1/run/echo', { method: 'POST', headers: { 'x-request-id': 'req-42' } });
    assert.equal(res.headers.get('x-request-id'), 'req-42');
    const made = await app.request('/bad');
    const rid = made.headers.get('x-request-id');
    assert.match(rid ?? '', /^[0-9a-f-]{36}$/, 'a request without a usable id gets a UUID');
    log.info({ headers: { authorization: 'Bearer emb_secret' } }, 'other');
    const [first, second, other] = lines;
    assert.deepEqual({ ...first, time: 0, pid: 0, hostname: '', ms: 0 }, { level: 30, time: 0, pid: 0, hostname: '', rid: 'req-42', method: 'POST', path: '/v1/run/echo', status: 201, ms: 0, msg: 'request' });
    assert.equal(second.rid, rid);
    assert.equal(second.status, 500);
    assert.deepEqual(other.headers, { authorization: '[redacted]' });
  });
});
