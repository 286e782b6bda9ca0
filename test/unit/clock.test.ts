// Queue time from the gateway's stamp (core/clock.ts): the monotonic clock on one boot, the wall clock otherwise.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { BOOT_ID, monoMs, sinceEnqueued } from '../../core/clock.ts';

describe('sinceEnqueued', () => {
  it('uses the monotonic clock when the stamp is from this boot', () => {
    assert.equal(sinceEnqueued({ enq: 1_000, mono: 50.25, boot: 'b1' }, 1_000, 50.5, 'b1'), 0.25);
    assert.equal(sinceEnqueued({ enq: 1_000, mono: 50.2, boot: 'b1' }, 1_002, 51.9, 'b1'), 1.7);
  });

  it('uses the wall clock for a stamp from another boot, or none', () => {
    assert.equal(sinceEnqueued({ enq: 1_000, mono: 50, boot: 'b2' }, 1_003, 50.5, 'b1'), 3);
    assert.equal(sinceEnqueued({ enq: 1_000 }, 1_004, 50.5, 'b1'), 4);
  });

  it('falls back to the wall clock when the two disagree (an offset monotonic clock), and is never negative', () => {
    assert.equal(sinceEnqueued({ enq: 1_000, mono: 50, boot: 'b1' }, 1_001, 9_050, 'b1'), 1);
    assert.equal(sinceEnqueued({ enq: 1_000, mono: 60, boot: 'b1' }, 1_000, 50, 'b1'), 0);
    assert.equal(sinceEnqueued({ enq: 1_005 }, 1_000, 50, 'b1'), 0);
  });

  it('stamps this process with a boot id and a clock that moves forward', () => {
    assert.match(BOOT_ID, /^[0-9a-zp]{16}$/);
    const a = monoMs();
    const b = monoMs();
    assert.ok(b >= a);
    assert.ok(sinceEnqueued({ enq: Date.now(), mono: a, boot: BOOT_ID }) >= 0);
  });
});
