// Job records on a real redis-server: a large result is kept beside its record, not passed through
// the finishing script (decisions/042), and reads back whole; a second finish changes nothing and
// leaves nothing behind.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { JobStore, type JobOutcome } from '../../core/jobs.ts';
import { keys } from '../../core/keys.ts';
import { SPILL_MIN_BYTES } from '../../core/live-entry.ts';
import { fileRedis } from '../helpers/file-redis.ts';

const server = fileRedis('jobs');
const BASE = 'http://embers.test';
const outcome = (body: string, httpStatus = 200): JobOutcome => ({ httpStatus, body, canceled: false, timing: undefined, version: 'v1' });
const leftovers = () => server.redis().keys('embers:spill-new:*');

describe('job records', () => {
  it('keep a large result beside the record, whole, for as long as the record', async () => {
    const redis = server.redis();
    const jobs = new JobStore(redis, 600);
    await jobs.create({ id: 'job_big', fn: 'echo', tenant: 'acme', key: 'k1' });
    const output = { text: 'é'.repeat(SPILL_MIN_BYTES) };
    assert.deepEqual(await jobs.finish('job_big', outcome(JSON.stringify(output))), { finished: true, webhook: undefined });
    assert.equal(await redis.hget(keys.job('job_big'), 'result'), '', 'the record holds no copy');
    assert.ok((await redis.ttl(keys.jobResult('job_big'))) > 500);
    const found = await jobs.get('job_big', BASE);
    assert.ok(found && 'view' in found);
    assert.equal(found.view.status, 'succeeded');
    assert.deepEqual(found.view.output, output);
    // Finished already: the second outcome is dropped, its bytes with it.
    assert.deepEqual(await jobs.finish('job_big', outcome(JSON.stringify({ text: 'x'.repeat(SPILL_MIN_BYTES) }))), { finished: false });
    assert.deepEqual((await jobs.get('job_big', BASE)) && ((await jobs.get('job_big', BASE)) as { view: { output: unknown } }).view.output, output);
    assert.deepEqual(await leftovers(), []);
    // Its result gone with the record's time: the job reads as expired, not as one without output.
    await redis.del(keys.jobResult('job_big'));
    assert.deepEqual(await jobs.get('job_big', BASE), { expired: true, tenant: 'acme' });
  });

  it('keep a small result in the record', async () => {
    const redis = server.redis();
    const jobs = new JobStore(redis, 600);
    await jobs.create({ id: 'job_small', fn: 'echo', tenant: 'acme', key: 'k1' });
    await jobs.finish('job_small', outcome('{"ok":true}'));
    assert.equal(await redis.exists(keys.jobResult('job_small')), 0);
    const found = await jobs.get('job_small', BASE);
    assert.deepEqual(found && 'view' in found ? found.view.output : undefined, { ok: true });
  });
});
