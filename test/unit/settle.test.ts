import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { waitAtMost } from '../../core/settle.ts';

describe('waitAtMost', () => {
  it('waits for a step that settles, either way, and gives up on one that never does, saying which', async () => {
    const warned: string[] = [];
    const log = { warn: (_o: unknown, msg: string) => warned.push(msg) } as unknown as Parameters<typeof waitAtMost>[2];
    assert.equal(await waitAtMost(Promise.resolve(1), 1000, log, 'a'), true);
    assert.equal(await waitAtMost(Promise.reject(new Error('no')), 1000, log, 'b'), true);
    assert.equal(await waitAtMost(undefined, 1000, log, 'c'), true);
    assert.equal(await waitAtMost(new Promise(() => {}), 20, log, 'the stuck step'), false);
    assert.deepEqual(warned, ['gave up waiting for the stuck step']);
  });
});
