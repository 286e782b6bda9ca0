import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Stops } from '../../runtime/replica/stops.ts';

describe('stopping a request for its caller', () => {
  it('stops a running request once, through its handle', () => {
    const stops = new Stops();
    const h = stops.enter('a');
    let stopped = 0;
    h.onStop = () => stopped++;
    stops.stop('a');
    stops.stop('a');
    assert.equal(h.requested, true);
    assert.equal(stopped, 1);
    stops.leave('a');
  });

  it('remembers a stop that came before its request started, for a while', () => {
    const stops = new Stops();
    stops.stop('early', 1_000);
    assert.equal(stops.enter('early').requested, true);
    // Used once: the same id entering again is not stopped.
    assert.equal(stops.enter('early').requested, false);
    assert.equal(stops.enter('other').requested, false);
    stops.stop('old', 0);
    stops.stop('new', 60_000);
    assert.equal(stops.enter('old').requested, false, 'forgotten after 30 s');
    assert.equal(stops.enter('new').requested, true);
  });

  it('keeps at most 1024 early stops', () => {
    const stops = new Stops();
    for (let i = 0; i < 2000; i++) stops.stop(`id${i}`, 1_000);
    assert.equal(stops.enter('id0').requested, false);
    assert.equal(stops.enter('id1999').requested, true);
  });
});
