import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { RunJobData } from '../../core/contracts.ts';
import { decodeLiveJob, encodeLiveJob } from '../../core/live-entry.ts';
import { hourKey, hourOf, type UsageRecord } from '../../core/usage.ts';

describe('live job encoding', () => {
  // Replicas read stream entries as Buffers.
  const fields = (...xs: string[]) => xs.map((x) => Buffer.from(x));
  const data = (input: unknown): RunJobData => ({ rid: 'r-1', id: 'u-1', gw: 'gw-1', input, enq: 1_700_000_000_000, deadline: 1_700_000_030_000, t: 'default', k: 'default', bin: 12 });

  it('splices the body text in as the input: the replica parses what the gateway parsed', () => {
    const bodies = [
      '{"image":"aGVsbG8="}',
      '  {\n  "nested": {"a": [1, 2.5, -3e-7, null, true]},\t"s": "é \\u00e9 \\"q\\" 😀"  }\n',
      '[1,2,3]',
      '"just a string"',
      '42',
      '{"__proto__": {"x": 1}, "dup": 1, "dup": 2}',
    ];
    for (const text of bodies) {
      const input = JSON.parse(text);
      const decoded = decodeLiveJob(fields('d', encodeLiveJob(data(input), text)));
      assert.deepEqual(decoded, data(input), text);
      assert.deepEqual(decoded, decodeLiveJob(fields('d', encodeLiveJob(data(input)))), text);
    }
  });

  it('sets a binary body (field b, read as a Buffer) as the input field data.raw names', () => {
    const bytes = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0xff, 0x00, 0xc3]);
    const fields = [Buffer.from('d'), Buffer.from(encodeLiveJob({ ...data({}), raw: 'image' }, '{}')), Buffer.from('b'), bytes];
    const decoded = decodeLiveJob(fields);
    assert.deepEqual(decoded, { ...data({ image: bytes }), raw: 'image' });
    assert.ok(Buffer.isBuffer((decoded!.input as { image: unknown }).image), 'the bytes as they came, not text');
    // Entries read as Buffers decode like strings.
    assert.deepEqual(decodeLiveJob([Buffer.from('d'), Buffer.from(encodeLiveJob(data({ a: 1 })))]), data({ a: 1 }));
    // An entry whose body is missing (damaged) still says who waits: marked, to be answered 500.
    assert.deepEqual(decodeLiveJob(fields.slice(0, 2)), { ...data({}), raw: 'image', bodyMissing: true });
  });

  it('without the text, stringifies the input', () => {
    assert.deepEqual(JSON.parse(encodeLiveJob(data({ a: 1 }))), data({ a: 1 }));
  });
});

describe('usage hour keys', () => {
  it("reads the hour straight from toISOString's text, and parses anything else", () => {
    const at = (s: string) => hourKey({ at: s, tenant: 't' } as UsageRecord);
    assert.equal(at('2026-11-23T09:59:59.999Z'), 'embers:usage:t:2026112309');
    assert.equal(at('2026-11-23T23:00:00Z'), 'embers:usage:t:2026112323');
    // An offset is converted to UTC.
    assert.equal(at('2026-11-24T01:30:00+02:00'), 'embers:usage:t:2026112323');
    for (let i = 0; i < 50; i++) {
      const d = new Date(Date.UTC(2026, 0, 1) + i * 7_919_000_123);
      assert.equal(at(d.toISOString()), `embers:usage:t:${hourOf(d)}`);
    }
  });
});
