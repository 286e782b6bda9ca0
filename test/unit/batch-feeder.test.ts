import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { chunkOf } from '../../core/batches.ts';
import { chunkLines, nextLookMs, Pace } from '../../scheduler/batch-pace.ts';

describe('nextLookMs (when the batch feeder looks for room in its window again)', () => {
  it('looks soon the first time, to learn how fast lines finish', () => {
    assert.equal(nextLookMs(64, undefined), 10);
  });
  it('looks again when about half the missing room should have freed, within 10–100 ms', () => {
    // 64 lines short at 1 line a ms: half of them in 32 ms.
    assert.equal(nextLookMs(64, 1), 32);
    // A fast function (4 lines a ms) is looked at every 10 ms, so the window never drains between looks.
    assert.equal(nextLookMs(64, 4), 10);
    // A slow one (ocr: ~0.025 lines a ms) at most every 100 ms.
    assert.equal(nextLookMs(64, 0.025), 100);
  });
  it('waits the longest when nothing finished since the last look (replicas still starting)', () => {
    assert.equal(nextLookMs(64, 0), 100);
  });
});

describe('batch chunks', () => {
  it('cut about 10 ms of lines at the rate they finish, 1 to 64, at most a quarter of the window', () => {
    assert.equal(chunkLines(0.025, 256), 1); // ocr
    assert.equal(chunkLines(4, 256), 40); // echo
    assert.equal(chunkLines(20, 256), 64);
    assert.equal(chunkLines(4, 64), 16);
    assert.equal(chunkLines(4, 1), 1);
  });
  it('lines fall into chunks counted from chunkFrom; before it, or with size 0 or 1, alone', () => {
    const r = { chunkSize: 10, chunkFrom: 101 };
    assert.equal(chunkOf(100, r), undefined);
    assert.equal(chunkOf(101, r), 101);
    assert.equal(chunkOf(110, r), 101);
    assert.equal(chunkOf(111, r), 111);
    assert.equal(chunkOf(500, { chunkSize: 1, chunkFrom: 1 }), undefined);
    assert.equal(chunkOf(500, { chunkSize: 0, chunkFrom: 0 }), undefined);
  });
  it('Pace reads the rate over the last second, once its samples span enough', () => {
    const pace = new Pace();
    pace.note(0, 0);
    pace.note(50, 0);
    assert.equal(pace.perMs(), undefined);
    // Bursty: a chunk of 40 at once, nothing between.
    pace.note(100, 40);
    assert.equal(pace.perMs(), 0.4);
    for (let t = 110; t <= 2000; t += 10) pace.note(t, 40 + Math.floor((t - 100) / 100) * 40);
    // Only about the last second counts: 4 lines a 10 ms.
    assert.ok(Math.abs(pace.perMs()! - 0.4) < 0.05);
    assert.equal(pace.perMs(5000), undefined);
  });
});
