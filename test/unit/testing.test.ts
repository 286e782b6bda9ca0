// embers/testing: a function file run in this process with its real model, as a replica runs it.
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { close, invoke, load } from 'embers/testing';
import { HandlerError, type CallInput, type CallOutput } from 'embers';
import type Upper from '../fixtures/functions/upper.ts';
import { fixture } from '../helpers/platform.ts';

after(close);

describe('embers/testing', () => {
  it('runs a handler on its real model, checks its input, and counts the batcher\'s work', async () => {
    const fn = await load(fixture('tiny.ts'));
    try {
      const outs = await Promise.all(Array.from({ length: 6 }, () => fn.run({ n: 2 })));
      for (const r of outs) {
        assert.equal(r.status, 200);
        const { classes } = r.output as { classes: number[][] };
        assert.equal(classes.length, 2);
        assert.equal(classes[0].length, 2);
        assert.ok(Math.abs(classes[0][0] + classes[0][1] - 1) < 1e-4, 'softmax rows');
      }
      const bad = await fn.run({ n: 99 });
      assert.equal(bad.status, 400);
      assert.equal(bad.error?.code, 'invalid_input');
      // Warmup's call and the six requests' twelve.
      assert.equal(fn.stats().cls.requests, 13);
    } finally {
      await fn.close();
    }
  });

  it('invoke loads a file once and takes any JSON where the function has no input schema', async () => {
    assert.deepEqual((await invoke(fixture('minimal.ts'), [1, 'a'])).output, { got: [1, 'a'] });
    assert.deepEqual((await invoke(new URL(`file://${fixture('minimal.ts')}`), null)).output, { got: null });
    await assert.rejects(invoke(fixture('nope.ts'), {}), /no function file/);
  });

  it('answers a handler\'s ctx.call and ctx.stream from stand-ins, and a name without one as missing', async () => {
    const file = fixture('caller.ts');
    const routed = await invoke(file, { mode: 'route', op: 'upper', text: 'hi' }, { calls: { upper: (input) => ({ text: (input as { text: string }).text.toUpperCase() }) } });
    assert.deepEqual(routed.output, { by: 'upper', result: { text: 'HI' } });
    const failed = await invoke(file, { mode: 'catch', to: 'upper', input: {} }, {
      calls: {
        upper: () => {
          throw new HandlerError(422, 'no text', 'no_text');
        },
      },
    });
    assert.deepEqual(failed.output, { status: 422, code: 'no_text', message: 'no text' });
    const missing = await invoke(file, { mode: 'catch', to: 'words', input: {} });
    assert.equal((missing.output as { status: number }).status, 404);
    const streamed = await invoke(file, { mode: 'stream', to: 'counter', input: {} }, {
      calls: {
        counter: async function* () {
          yield { i: 1 };
          yield { i: 2 };
        },
      },
    });
    assert.deepEqual(streamed.output, { chunks: [{ i: 1 }, { i: 2 }] });
  });

  it('HandlerError\'s instanceof holds across copies, and a subclass keeps its own', () => {
    class NotFound extends HandlerError {}
    const copy = Object.defineProperty(new Error('x'), Symbol.for('embers.handler-error'), { value: true });
    assert.ok(copy instanceof HandlerError);
    assert.ok(new NotFound(404, 'x') instanceof HandlerError);
    assert.ok(new NotFound(404, 'x') instanceof NotFound);
    assert.ok(!(new HandlerError(400, 'x') instanceof NotFound));
  });

  it('types a call by its callee\'s definition', () => {
    // Checked by tsc: the callee's input schema and handler's return type.
    const input: CallInput<typeof Upper> = { text: 'a' };
    const output: CallOutput<typeof Upper> = { text: 'A' };
    // @ts-expect-error: upper takes { text: string }
    const wrong: CallInput<typeof Upper> = { txt: 'a' };
    assert.deepEqual([input, output, wrong], [{ text: 'a' }, { text: 'A' }, { txt: 'a' }]);
  });

  it('refuses a call whose input is over the channel\'s bound (413) or holds bytes, failing only that call', async () => {
    const file = fixture('caller.ts');
    const upper = { upper: (input: unknown) => input };
    const big = await invoke(file, { mode: 'catch', to: 'upper', input: { text: 'x'.repeat(1_100_000) } }, { calls: upper });
    assert.equal((big.output as { status: number; code: string }).status, 413);
    assert.equal((big.output as { code: string }).code, 'call_input_too_large');
    const bytes = await invoke(file, { mode: 'call', to: 'upper', input: Buffer.from('raw') }, { calls: upper });
    assert.equal(bytes.status, 500);
    assert.match(bytes.error!.message, /base64/);
  });
});
