import assert from 'node:assert/strict';
import { EventEmitter } from 'node:events';
import { describe, it } from 'node:test';
import type { Redis } from 'ioredis';
import { encodeReplies, encodeReply, type ReplyHeader } from '../../core/contracts.ts';
import { ReplyHub } from '../../gateway/replies.ts';
import { keys } from '../../core/keys.ts';

const timing = { queueMs: 0, handlerMs: 0, inferMs: 0, batchMs: 0, execMs: 0, inputMs: 0, outputMs: 0 };

/** A hub on a stand-in subscriber: the test delivers messages as ioredis would ('messageBuffer'). */
function hub() {
  const sub = Object.assign(new EventEmitter(), { subscribe: async () => 1 });
  const replies = new ReplyHub(sub as unknown as Redis, 'gw-test');
  const deliver = (...headers: (Omit<ReplyHeader, 'status' | 'replica' | 'timing'> & { body: string })[]) =>
    sub.emit('messageBuffer', Buffer.from(keys.replyChannel('gw-test')), Buffer.from(encodeReplies(headers.map(({ body, ...h }) => encodeReply({ ...h, status: 200, replica: 'r', timing }, body))) as string));
  return { replies, deliver };
}

describe('reply routing', () => {
  it('routes by the gateway’s own id, never by a request id two callers share', async () => {
    const { replies, deliver } = hub();
    const a = replies.expect('id-a', 5_000);
    const b = replies.expect('id-b', 5_000);
    deliver({ rid: 'shared', id: 'id-b', body: '"for b"' }, { rid: 'shared', id: 'id-a', body: '"for a"' });
    assert.equal((await a)!.body.toString(), '"for a"');
    assert.equal((await b)!.body.toString(), '"for b"');
    assert.equal(replies.inFlight, 0);
  });

  it('a reply without an id, or for a request nobody waits for, goes nowhere', async () => {
    const { replies, deliver } = hub();
    const waiting = replies.expect('id-1', 5_000);
    deliver({ rid: 'rid-x', body: 'no id' }, { rid: 'rid-x', id: 'id-gone', body: 'gone' });
    assert.equal(replies.inFlight, 1);
    deliver({ rid: 'rid-x', id: 'id-1', body: '1' });
    assert.equal((await waiting)!.body.toString(), '1');
  });

  it('a request that timed out or was cancelled takes no later reply', async () => {
    const { replies, deliver } = hub();
    const late = replies.expect('id-late', 10);
    assert.equal(await late, null);
    const cancelled = replies.expect('id-c', 5_000);
    replies.cancel('id-c');
    assert.equal(await cancelled, null);
    const waiting = replies.expect('id-w', 5_000);
    deliver({ rid: 'r1', id: 'id-w', body: '"w"' });
    assert.equal((await waiting)!.body.toString(), '"w"');
  });
});

describe('a broken subscription', () => {
  it('ends the requests waiting on it at once, as replies that may have been missed; later ones wait as usual', async () => {
    const sub = Object.assign(new EventEmitter(), { subscribe: async () => 1 });
    const replies = new ReplyHub(sub as unknown as Redis, 'gw-test');
    await replies.start();
    const waiting = replies.expect('id-1', 60_000);
    sub.emit('close');
    assert.equal(await waiting, null);
    assert.equal(replies.listening, false);
    assert.equal(replies.takeLost('id-1'), true);
    assert.equal(replies.takeLost('id-1'), false, 'asked once');
    const later = replies.expect('id-2', 10);
    assert.equal(await later, null);
    assert.equal(replies.takeLost('id-2'), false, 'a plain timeout is not a lost reply');
  });
});
