import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { LoneChooser, type LoneSide } from '../../native/lone-chooser.ts';

/** Runs `n` lone inferences whose time each side's `cost` gives; returns the sides taken. */
function drive(c: LoneChooser, cost: (side: LoneSide, i: number) => number, n: number, from = 0): LoneSide[] {
  const taken: LoneSide[] = [];
  for (let i = from; i < from + n; i++) {
    const side = c.choose();
    taken.push(side);
    c.observe(side, cost(side, i));
  }
  return taken;
}

describe('LoneChooser', () => {
  it('measures both sides, wide first, before choosing', () => {
    const c = new LoneChooser({ minSamples: 3 });
    assert.deepEqual(drive(c, () => 10, 6), ['wide', 'narrow', 'wide', 'narrow', 'wide', 'narrow']);
  });

  it('keeps wide where it is faster, and ties go wide', () => {
    const faster = new LoneChooser();
    const taken = drive(faster, (s) => (s === 'wide' ? 45 : 68), 200);
    assert.equal(faster.stats.choice, 'wide');
    assert.ok(taken.slice(6).filter((s) => s === 'narrow').length <= 200 / 32 + 1, 'narrow only to explore');
    const tie = new LoneChooser();
    drive(tie, (s) => (s === 'wide' ? 50 : 48.5), 100);
    assert.equal(tie.stats.choice, 'wide', 'narrow 3 % faster is inside the 5 % margin');
  });

  it('runs narrow where one thread is faster, and reports both medians', () => {
    const c = new LoneChooser();
    const taken = drive(c, (s) => (s === 'wide' ? 46 : 42), 200);
    assert.deepEqual(c.stats, { choice: 'narrow', wide: 46, narrow: 42 });
    assert.ok(taken.slice(6).filter((s) => s === 'wide').length <= 200 / 32 + 1, 'wide only to explore');
  });

  it('follows the machine when it changes, through its explorations', () => {
    const c = new LoneChooser();
    // Wide is faster for 300 runs, then the second core slows down.
    const cost = (s: LoneSide, i: number) => (s === 'wide' ? (i < 300 ? 45 : 80) : 68);
    drive(c, cost, 300);
    assert.equal(c.stats.choice, 'wide');
    const after = drive(c, cost, 300, 300);
    assert.equal(c.stats.choice, 'narrow');
    assert.ok(after.slice(-100).filter((s) => s === 'narrow').length >= 90);
    // And back: the side not chosen is re-measured once every 32 lone runs.
    const back = (s: LoneSide) => (s === 'wide' ? 40 : 68);
    drive(c, back, 300, 600);
    assert.equal(c.stats.choice, 'wide');
  });

  it('a run slowed once (a GC pause) does not swing the choice', () => {
    const c = new LoneChooser();
    drive(c, (s, i) => (s === 'wide' ? (i === 20 ? 400 : 45) : 68), 60);
    assert.equal(c.stats.choice, 'wide');
  });

  it('ignores times that are not times', () => {
    const c = new LoneChooser();
    c.observe('narrow', Number.NaN);
    c.observe('narrow', -1);
    assert.deepEqual(c.stats, { choice: 'wide', wide: Number.NaN, narrow: Number.NaN });
  });
});
