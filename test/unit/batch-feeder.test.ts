import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { nextLookMs } from '../../scheduler/batch-feeder.ts';

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
