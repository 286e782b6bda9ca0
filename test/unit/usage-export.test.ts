import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { compareIds, encodeIntent, fileBody, fileKey, fileToWrite, hourPrefix, hourPrefixes, nextStep, overlapping, parseFileKey, partition, TimeOrder, toStreamRecord, type StreamRecord } from '../../core/usage-export-plan.ts';

const rec = (streamId: string, id: string, tenant: string, at: string): StreamRecord => toStreamRecord(streamId, JSON.stringify({ id, tenant, fn: `${tenant}.echo`, at }))!;

describe('usage export: stream ids and object names', () => {
  it('orders stream ids by time, then sequence, as numbers', () => {
    assert.ok(compareIds('1700000000000-2', '1700000000000-10') < 0);
    assert.ok(compareIds('999-5', '1000-0') < 0);
    assert.equal(compareIds('5-5', '5-5'), 0);
  });

  it("files a record under its tenant and the UTC hour of its `at`, the roll-up's hour", () => {
    assert.equal(hourPrefix('acme', Date.parse('2026-11-03T07:59:59.999Z')), 'usage/acme/2026-11-03/07/');
    assert.deepEqual(hourPrefixes('acme', Date.parse('2026-11-03T22:30:00Z'), Date.parse('2026-11-04T00:00:01Z')), ['usage/acme/2026-11-03/22/', 'usage/acme/2026-11-03/23/', 'usage/acme/2026-11-04/00/']);
  });

  it('names a file by the stream ids it spans, numbered only where a failover left that name taken', () => {
    const p = 'usage/acme/2026-11-03/07/';
    assert.equal(fileKey(p, '10-0', '20-3', new Set()), `${p}10-0-20-3.jsonl.gz`);
    assert.equal(fileKey(p, '10-0', '20-3', new Set([`${p}10-0-20-3.jsonl.gz`])), `${p}10-0-20-3_2.jsonl.gz`);
    assert.deepEqual(parseFileKey(`${p}10-0-20-3_2.jsonl.gz`), { key: `${p}10-0-20-3_2.jsonl.gz`, first: '10-0', last: '20-3' });
    assert.equal(parseFileKey(`${p}notes.txt`), null);
  });

  it('checks a batch against the files whose range overlaps its own, and no others', () => {
    const files = [parseFileKey('a/1-0-5-0.jsonl.gz')!, parseFileKey('a/6-0-9-0.jsonl.gz')!, parseFileKey('a/10-0-12-0.jsonl.gz')!];
    assert.deepEqual(overlapping(files, '9-0', '10-0').map((f) => f.first), ['6-0', '10-0']);
    assert.deepEqual(overlapping(files, '13-0', '20-0'), []);
  });
});

describe('usage export: batches', () => {
  it('groups a batch by tenant and hour, each group in stream order', () => {
    const groups = partition([rec('1-0', 'a', 'acme', '2026-11-03T07:10:00.000Z'), rec('2-0', 'b', 'bolt', '2026-11-03T07:10:00.000Z'), rec('3-0', 'c', 'acme', '2026-11-03T08:00:00.000Z'), rec('4-0', 'd', 'acme', '2026-11-03T07:59:00.000Z')]);
    assert.deepEqual(
      [...groups].map(([k, g]) => [k, g.map((r) => r.id)]),
      [
        ['usage/acme/2026-11-03/07/', ['a', 'd']],
        ['usage/bolt/2026-11-03/07/', ['b']],
        ['usage/acme/2026-11-03/08/', ['c']],
      ],
    );
  });

  it('leaves out records an overlapping file holds, and writes nothing when it holds them all (a redo)', () => {
    const p = 'usage/acme/2026-11-03/07/';
    const group = [rec('1-0', 'a', 'acme', '2026-11-03T07:00:02.000Z'), rec('2-0', 'b', 'acme', '2026-11-03T07:00:01.000Z'), rec('3-0', 'c', 'acme', '2026-11-03T07:00:03.000Z')];
    const w = fileToWrite(p, group, new Set(['a']), new Set());
    assert.deepEqual([w!.key, w!.records.map((r) => r.id)], [`${p}2-0-3-0.jsonl.gz`, ['b', 'c']]);
    assert.equal(fileToWrite(p, group, new Set(['a', 'b', 'c']), new Set()), null);
    // Lines by time: the same records give the same bytes.
    assert.deepEqual(fileBody(group).trim().split('\n').map((l) => (JSON.parse(l) as { id: string }).id), ['b', 'a', 'c']);
  });

  it('redoes an intent that starts at the cursor, forgets one that does not, and plans after the cursor otherwise', () => {
    const intent = encodeIntent({ after: '5-0', last: '9-0' });
    assert.deepEqual(nextStep(null, null), { kind: 'plan', after: '0-0' });
    assert.deepEqual(nextStep('5-0', null), { kind: 'plan', after: '5-0' });
    assert.deepEqual(nextStep('5-0', intent), { kind: 'redo', intent: { after: '5-0', last: '9-0' } });
    // A failover rolled the cursor back (or forward) past the intent.
    assert.deepEqual(nextStep('3-0', intent), { kind: 'forget', raw: intent });
    assert.deepEqual(nextStep('5-0', 'not json'), { kind: 'forget', raw: 'not json' });
  });

  it('keeps records that are not usage records out', () => {
    assert.equal(toStreamRecord('1-0', '{"id":"x"}'), null);
    assert.equal(toStreamRecord('1-0', 'nope'), null);
  });
});

describe('usage export: time order with bounded memory', () => {
  it('gives records in time order when none is further out of it than its window', () => {
    const order = new TimeOrder(3);
    const ats = [5, 3, 4, 1, 2, 9, 7, 8, 6, 10];
    const out: number[] = [];
    for (const [i, at] of ats.entries()) {
      const r = order.push({ streamId: `${i}-0`, line: '', id: String(i), tenant: 't', atMs: at });
      if (r) out.push(r.atMs);
    }
    for (let r = order.pop(); r; r = order.pop()) out.push(r.atMs);
    assert.deepEqual(out, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
  });
});
