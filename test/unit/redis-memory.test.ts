import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ApiError } from '../../gateway/errors.ts';
import { RedisMemory } from '../../gateway/quotas.ts';

const MB = 2 ** 20;

/** An `INFO memory` answer source the test sets; counts reads. */
function fakeInfo(o: { used: number; maxmemory?: number; machine?: number }) {
  const f = {
    ...o,
    reads: 0,
    fail: false,
    info: async (_section: string) => {
      f.reads++;
      if (f.fail) throw new Error('Redis is down');
      return `# Memory\r\nused_memory:${f.used}\r\nused_memory_human:x\r\ntotal_system_memory:${f.machine ?? 0}\r\nmaxmemory:${f.maxmemory ?? 0}\r\n`;
    },
  };
  return f;
}

const refusal = async (p: Promise<unknown>) => {
  try {
    await p;
  } catch (err) {
    assert.ok(err instanceof ApiError);
    return err;
  }
  return undefined;
};

describe('Redis memory admission', () => {
  it('refuses a run that would take Redis past the set limit, with a 503 that says what to do', async () => {
    const redis = fakeInfo({ used: 90 * MB, machine: 8192 * MB });
    const memory = new RedisMemory(redis, 100 * MB, () => 0);
    await memory.check(5 * MB);
    const err = await refusal(memory.check(6 * MB));
    assert.equal(err?.status, 503);
    assert.equal(err?.code, 'redis_full');
    assert.match(err!.message, /95 MB of queued requests.*6\.0 MB.*limit of 100 MB \(EMBERS_REDIS_MEMORY_LIMIT_MB\); nothing was queued/);
    assert.equal((err as unknown as { retryAfter: number }).retryAfter, 1);
  });

  it("takes its budget from Redis's maxmemory, else from Redis's machine", async () => {
    const capped = new RedisMemory(fakeInfo({ used: 80 * MB, maxmemory: 100 * MB, machine: 8192 * MB }), undefined, () => 0);
    await capped.check(9 * MB);
    assert.match((await refusal(capped.check(2 * MB)))!.message, /limit of 90 MB \(90 % of Redis's maxmemory/);
    const open = new RedisMemory(fakeInfo({ used: 60 * MB, machine: 128 * MB }), undefined, () => 0);
    await open.check(4 * MB);
    assert.match((await refusal(open.check(1 * MB)))!.message, /limit of 64 MB \(half the memory of Redis's machine/);
  });

  it('counts what it admitted since the last read, reads at most every 250 ms, and drops the count a read covers', async () => {
    const redis = fakeInfo({ used: 10 * MB });
    const clock = { now: 0 };
    const memory = new RedisMemory(redis, 20 * MB, () => clock.now);
    await memory.check(4 * MB);
    await memory.check(4 * MB);
    assert.equal(redis.reads, 1);
    assert.ok(await refusal(memory.check(4 * MB)), '10 read + 8 admitted + 4 is over 20');
    // The next read finds the admitted bytes in Redis (or drained): they are no longer added.
    redis.used = 12 * MB;
    clock.now = 300;
    // Past 250 ms, and over half the limit as last counted (18 MB): this request waits for a fresh read.
    await memory.check(1 * MB);
    assert.equal(redis.reads, 2);
    await memory.check(6 * MB);
    assert.ok(await refusal(memory.check(2 * MB)), '12 + 1 + 6 + 2 is over 20');
  });

  it('admits when Redis cannot be read (the enqueue answers for an unreachable Redis)', async () => {
    const redis = fakeInfo({ used: 0 });
    redis.fail = true;
    const memory = new RedisMemory(redis, 1 * MB, () => 0);
    await memory.check(10 * MB);
  });
});
