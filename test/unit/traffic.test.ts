// Traffic plans and buckets: pure, no Redis.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { planTraffic, sharesOf, toSplit, trafficBucket, TrafficError } from '../../core/traffic.ts';
import { baseKey, pinnedVersion, plainName, qualifiedName, versionKey } from '../../core/names.ts';
import { FUNCTION_NAME } from '../../core/contracts.ts';
import { TENANT_ID } from '../../core/tenants.ts';

const versions = ['v1', 'v2', 'v3'];
const refused = (shares: Record<string, number>, code: string, message: RegExp) =>
  assert.throws(() => planTraffic('ocr', shares, 'v2', versions), (err: unknown) => err instanceof TrafficError && err.code === code && message.test(err.message));

describe('planning a split', () => {
  it('keeps the active version on the function\'s key and puts the other on its own', () => {
    assert.deepEqual(planTraffic('ocr', { v3: 10, v2: 90 }, 'v2', versions), { active: 'v2', split: { version: 'v3', percent: 10 } });
    assert.deepEqual(planTraffic('ocr', { v3: 90, v2: 10 }, 'v2', versions), { active: 'v2', split: { version: 'v3', percent: 90 } });
  });

  it('makes the larger share active when the active version is not in it; one version at 100 % is active alone', () => {
    assert.deepEqual(planTraffic('ocr', { v1: 30, v3: 70 }, 'v2', versions), { active: 'v3', split: { version: 'v1', percent: 30 } });
    assert.deepEqual(planTraffic('ocr', { v1: 100 }, 'v2', versions), { active: 'v1', split: null });
    assert.deepEqual(planTraffic('ocr', { v3: 100, v2: 0 }, 'v2', versions), { active: 'v3', split: null });
  });

  it('refuses what it cannot do, saying what to send', () => {
    refused({ v3: 10, v2: 80 }, 'split_not_100', /add up to 100 %, these add up to 90 %/);
    refused({ v1: 10, v2: 10, v3: 80 }, 'too_many_versions', /at most two versions; got v1, v2, v3/);
    refused({ v9: 10, v2: 90 }, 'version_not_found', /ocr has no version "v9"; it has v1, v2, v3/);
    refused({ v3: 10.5, v2: 89.5 }, 'invalid_traffic', /whole percent/);
    refused({}, 'invalid_traffic', /one or two versions/);
  });

  it('shows each version\'s share', () => {
    assert.deepEqual(sharesOf({ active: 'v2', split: { version: 'v3', percent: 10, since: '' } }), { v2: 90, v3: 10 });
    assert.deepEqual(sharesOf({ active: 'v2', split: null }), { v2: 100 });
  });
});

describe('buckets', () => {
  it('a caller key always lands in the same bucket, and a bucket in the split stays in it as its share grows', () => {
    const b = trafficBucket('ocr', 'user-42');
    for (let i = 0; i < 5; i++) assert.equal(trafficBucket('ocr', 'user-42'), b);
    if (toSplit({ percent: 10 }, b)) assert.ok(toSplit({ percent: 50 }, b));
    assert.equal(toSplit(null, 0), false);
  });

  it('caller keys spread over the buckets', () => {
    const counts = new Array(10).fill(0);
    for (let i = 0; i < 10_000; i++) counts[Math.floor(trafficBucket('ocr', `caller-${i}`) / 10)]++;
    // 1000 expected per tenth; 5 standard deviations is about 150.
    for (const n of counts) assert.ok(n > 850 && n < 1150, String(counts));
  });

  it('without a key, draws at random', () => {
    assert.equal(trafficBucket('ocr', undefined, () => 0.999), 99);
    assert.equal(trafficBucket('ocr', '', () => 0), 0);
  });
});

describe('version keys', () => {
  it('pin a version of a function under a key no tenant can name', () => {
    for (const key of ['ocr', qualifiedName('t_acme', 'ocr')]) {
      const pinned = versionKey(key, 'v3');
      assert.equal(baseKey(pinned), key);
      assert.equal(pinnedVersion(pinned), 'v3');
      assert.equal(pinnedVersion(key), null);
      assert.equal(plainName(pinned), 'ocr');
    }
    assert.ok(!FUNCTION_NAME.test('ocr@v3') && !TENANT_ID.test('t_acme@v3'));
  });
});

describe('the shares `embers versions deploy` reads', () => {
  it('takes v3=10% and v3=10, a bare version as all of it, and refuses the rest', async () => {
    const { parseShare } = await import('../../cli/commands/versions.ts');
    assert.deepEqual([parseShare('v3=10%'), parseShare('v2=90'), parseShare('v3')], [['v3', 10], ['v2', 90], ['v3', 100]]);
    for (const bad of ['3=10%', 'v3=ten', 'v3:10']) assert.throws(() => parseShare(bad), /write it as v3=10%/);
  });
});
