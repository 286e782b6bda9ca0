// embers/testing: a function file run in this process with its real model, as a replica runs it.
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { close, invoke, load } from 'embers/testing';
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
});
