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
    // Re-checks 4, 8 and 16 runs after the first choice, then every 32.
    assert.ok(taken.slice(6).filter((s) => s === 'narrow').length <= 200 / 32 + 3, 'narrow only to explore');
    const tie = new LoneChooser();
    const tieTaken = drive(tie, (s) => (s === 'wide' ? 50 : 48.5), 200);
    assert.equal(tie.stats.choice, 'wide', 'narrow 3 % faster is inside the 5 % margin');
    // Such re-checks confirm the choice: they do not keep coming 4 runs apart.
    const tieChecks = tieTaken.slice(6).flatMap((s, i) => (s === 'narrow' ? [i] : []));
    assert.equal(tieChecks.at(-1)! - tieChecks.at(-2)!, 32);
  });

  it('runs narrow where one thread is faster, and reports both medians', () => {
    const c = new LoneChooser();
    const taken = drive(c, (s) => (s === 'wide' ? 46 : 42), 200);
    assert.deepEqual(c.stats, { choice: 'narrow', wide: 46, narrow: 42 });
    assert.ok(taken.slice(6).filter((s) => s === 'wide').length <= 200 / 32 + 3, 'wide only to explore');
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
    // And back, through the re-checks of the side not chosen.
    const back = (s: LoneSide) => (s === 'wide' ? 40 : 68);
    drive(c, back, 300, 600);
    assert.equal(c.stats.choice, 'wide');
  });

  it('goes back to wide within a few runs of a slow spell ending', () => {
    const c = new LoneChooser();
    // The second vCPU slow for 60 runs (wide 2x, its time with one core), as measured here.
    const spell = (s: LoneSide, i: number) => (s === 'wide' ? (i >= 300 && i < 360 ? 90 : 45) : 68);
    drive(c, spell, 300);
    assert.equal(c.stats.choice, 'wide');
    const during = drive(c, spell, 60, 300);
    assert.ok(during.slice(10).filter((s) => s === 'narrow').length >= 45, 'narrow while wide is slow');
    const after = drive(c, spell, 100, 360);
    // The first re-check after the spell finds wide cheaper (at most 32 runs in); the next ones
    // come 4 runs apart, and the third fast sample of wide's five flips the choice.
    const firstWide = after.findIndex((s, i) => s === 'wide' && after.slice(i, i + 4).every((x) => x === 'wide'));
    assert.ok(firstWide >= 0 && firstWide <= 32 + 2 * 4 + 1, `back to wide after ${firstWide} runs`);
    assert.equal(c.stats.choice, 'wide');
  });

  it('re-checks often just after a switch, then back to one run in exploreEvery', () => {
    const c = new LoneChooser();
    const wideSlow = (s: LoneSide) => (s === 'wide' ? 90 : 68);
    const taken = drive(c, wideSlow, 400);
    assert.equal(c.stats.choice, 'narrow');
    const checks = taken.slice(6).flatMap((s, i) => (s === 'wide' ? [i + 6] : []));
    // Re-checks confirming narrow: 4, 8, 16, then 32 runs apart.
    const gaps = checks.slice(1).map((at, i) => at - checks[i]);
    assert.equal(checks[0], 6 + 3, 'the first re-check on the 4th run after the first choice');
    assert.deepEqual(gaps.slice(0, 3), [8, 16, 32], `gaps ${gaps.join(',')}`);
    assert.ok(gaps.slice(3).every((g) => g === 32), `gaps ${gaps.join(',')}`);
  });

  it('a re-check that finds narrow cheaper brings the next ones closer', () => {
    const c = new LoneChooser();
    // Wide is faster for 300 runs (re-checks 32 apart by then), then narrow gets much cheaper.
    const cost = (s: LoneSide, i: number) => (s === 'wide' ? 45 : i < 300 ? 68 : 30);
    drive(c, cost, 300);
    assert.equal(c.stats.choice, 'wide');
    const after = drive(c, cost, 60, 300);
    const firstNarrowStretch = after.findIndex((_, i) => after.slice(i, i + 4).every((x) => x === 'narrow'));
    // The first re-check that sees it (≤ 32 runs in), then two more 4 runs apart.
    assert.ok(firstNarrowStretch >= 0 && firstNarrowStretch <= 32 + 2 * 4 + 1, `narrow after ${firstNarrowStretch} runs`);
    assert.equal(c.stats.choice, 'narrow');
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
