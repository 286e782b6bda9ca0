// Many functions on few machines: idle replicas hold memory, not slots, so many small functions
// stay warm at once; a function with work and no room gets the memory an idle replica held (never
// a busy one's); work waits in its queue while every slot runs requests; keep-alive ends at
// idleTimeoutS whatever the stable window; and a node that dies with its replicas has its held
// requests answered by the survivors long before their lock would have let them go.
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { ReplicaRecord } from '../../runtime/replica/replica.ts';
import { LIVE_GROUP } from '../../core/live-queue.ts';
import { ROOT, eventually, fixture, startTestPlatform, type TestPlatform } from '../helpers/platform.ts';
import { keys, liveStream } from '../../core/keys.ts';

let p: TestPlatform;
let tmp: string;
const MiB = 2 ** 20;
const NODE_MEMORY = 1024 * MiB;

before(async () => {
  // Two slots and 1 GiB for replicas; a lock and a stable window far longer than any wait below,
  // so only reclaiming, keep-alive and hand-over can explain what the tests see; a request at a
  // time per replica, so that every replica holds some of a burst.
  p = await startTestPlatform({ EMBERS_NODE_SLOTS: '2', EMBERS_NODE_MEMORY: String(NODE_MEMORY), EMBERS_REPLICA_CONCURRENCY: '1', EMBERS_SCHEDULER_TICK_MS: '200', EMBERS_SCALE_STABLE_WINDOW_S: '300', EMBERS_JOB_LOCK_MS: '600000', EMBERS_QUEUE_TIMEOUT_MS: '45000' });
  tmp = await mkdtemp(path.join(os.tmpdir(), 'embers-fleet-'));
});
after(async () => {
  await p?.close();
  await rm(tmp, { recursive: true, force: true });
});

/** A function that sleeps `ms` and keeps its replica `idleTimeoutS` after its last request. */
async function deploySleeper(name: string, idleTimeoutS: number): Promise<void> {
  const file = path.join(tmp, `${name}.ts`);
  await writeFile(
    file,
    `import { defineFunction, z } from 'embers';
export default defineFunction({
  name: '${name}',
  input: z.object({ ms: z.number().int().min(0).max(30000).default(0) }),
  scaling: { minReplicas: 0, maxReplicas: 1, idleTimeoutS: ${idleTimeoutS} },
  async handler({ ms }) {
    await new Promise((r) => setTimeout(r, ms));
    return { pid: process.pid };
  },
});
`,
  );
  await p.deploy(file);
}

const call = (fn: string, body: unknown = {}) => p.fetch(`/v1/run/${fn}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
const replicasOf = async (fn: string) => ((await (await p.fetch(`/v1/functions/${fn}`)).json()) as { replicas: { state: string }[] }).replicas;

const remove = async (...fns: string[]) => {
  for (const fn of fns) assert.equal((await p.fetch(`/v1/functions/${fn}`, { method: 'DELETE' })).status, 200);
};

describe('room for work', () => {
  it('N + 1 functions on memory for N: the last is served from an idle replica\'s room; a busy one is never reclaimed', async () => {
    // Footprints as if measured: two of these fit the node's memory, three do not.
    for (const name of ['busy', 'idle', 'late']) await p.redis().hset(keys.footprints(name), 'v1', 450 * MiB);
    for (const name of ['busy', 'idle', 'late']) await deploySleeper(name, 600);
    assert.equal((await call('idle')).status, 200);
    // busy holds a request while late arrives: the memory is taken, half by a replica with work.
    const held = call('busy', { ms: 4_000 });
    await eventually(async () => (await replicasOf('busy')).some((r) => r.state === 'ready'), 'busy to be running its request');
    const late = await call('late');
    assert.equal(late.status, 200, await late.text());
    assert.equal((await held).status, 200, 'the busy replica kept its request');
    await eventually(async () => (await replicasOf('idle')).length === 0, 'the idle replica to be reclaimed');
    // idle comes back when called again, from another idle replica's room.
    assert.equal((await call('idle')).status, 200);
    await remove('busy', 'idle', 'late');
  });

  it('many small functions are warm at once on a node with two slots', async () => {
    const small = ['s0', 's1', 's2', 's3', 's4'];
    for (const name of small) await deploySleeper(name, 600);
    for (const name of small) {
      assert.equal((await call(name)).status, 200);
      // Measured before the next arrives: an unmeasured one counts as large.
      await eventually(async () => Number(await p.redis().hget(keys.footprints(name), 'v1')) || null, `the footprint of ${name}`);
    }
    const measured = await Promise.all(small.map(async (name) => Number(await p.redis().hget(keys.footprints(name), 'v1'))));
    assert.ok(measured.reduce((a, b) => a + b, 0) < NODE_MEMORY, `five fit the node's memory: ${measured}`);
    // Five idle replicas on two slots: none was reclaimed for another.
    for (const name of small) assert.equal((await replicasOf(name)).filter((r) => r.state === 'ready').length, 1, name);
    await remove(...small);
  });

  it('work waits in its queue while every slot runs requests, and is answered when one frees', async () => {
    for (const name of ['hold1', 'hold2', 'third']) await deploySleeper(name, 600);
    const held = [call('hold1', { ms: 3_000 }), call('hold2', { ms: 3_000 })];
    await eventually(async () => (await Promise.all(['hold1', 'hold2'].map(replicasOf))).every((rs) => rs.some((r) => r.state === 'ready')), 'both slots to be running a request');
    const third = await call('third');
    assert.equal(third.status, 200, await third.text());
    assert.deepEqual((await Promise.all(held)).map((r) => r.status), [200, 200]);
    await remove('hold1', 'hold2', 'third');
  });

  it("a replica's footprint is measured and kept per version; nodes advertise a memory budget", async () => {
    await deploySleeper('measured', 600);
    assert.equal((await call('measured')).status, 200);
    const bytes = await eventually(async () => Number(await p.redis().hget(keys.footprints('measured'), 'v1')) || null, 'the footprint of measured v1');
    // At least a Node.js process's worth, and far below the machine.
    assert.ok(bytes > 20 * 2 ** 20 && bytes < os.totalmem(), String(bytes));
    const node = JSON.parse((await p.redis().get(keys.node(p.agent.id)))!) as { memoryBytes?: number };
    assert.equal(node.memoryBytes, NODE_MEMORY);
    await remove('measured');
  });

  it('a function goes to zero idleTimeoutS after its last request, not after the stable window (300 s here)', async () => {
    await deploySleeper('brief', 2);
    assert.equal((await call('brief')).status, 200);
    await eventually(async () => (await replicasOf('brief')).length === 0, 'brief to go to zero', 30_000);
    // Called again after the gap: the gap is learned, and kept where the next leader finds it.
    assert.equal((await call('brief')).status, 200);
    const learned = await eventually(async () => {
      const gaps = JSON.parse((await p.redis().hget(keys.idleTimes, 'brief')) ?? '[]') as number[];
      return gaps.length > 0 ? gaps : null;
    }, 'the gap to be recorded');
    assert.ok(learned[0] >= 2_000, `a gap longer than the keep-alive: ${learned}`);
  });
});

describe('many functions deployed, few active', () => {
  it('a scheduler pass looks only at functions with work, replicas or a keep-alive under way', async () => {
    const bundle = Buffer.from('export default {}').toString('base64');
    for (let i = 0; i < 150; i++) {
      const res = await p.fetch('/v1/functions', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ spec: { name: `idle-${i}`, inputSchema: { type: 'object' } }, bundle }) });
      assert.equal(res.status, 201, await res.text());
    }
    await deploySleeper('now', 1);
    // Deployed and never called: none of them stays on the scheduler's list.
    await eventually(async () => p.agent.scheduler.watching <= 4, `the scheduler to stop watching idle functions (watching ${p.agent.scheduler.watching})`);
    assert.equal((await call('now')).status, 200, 'a function off the list is served when called');
    await eventually(async () => (await replicasOf('now')).length === 0, 'now to go back to zero');
    await eventually(async () => p.agent.scheduler.watching <= 4, 'and off the list again');
  });
});

describe('a node lost with its replicas', () => {
  let agent: ChildProcess | undefined;
  after(() => {
    if (agent?.pid) {
      try {
        process.kill(-agent.pid, 'SIGKILL');
      } catch {
        // Gone already.
      }
    }
  });

  it('has the requests its replicas held answered by the survivors, not after the lock time', async () => {
    await p.deploy(fixture('sleepy.ts'));
    // A second node: an agent process (and its replicas) in a process group of its own.
    const dataDir = await mkdtemp(path.join(tmp, 'node-b-'));
    agent = spawn(process.execPath, ['cli/bin.mjs', 'agent'], {
      cwd: ROOT,
      detached: true,
      stdio: ['ignore', 'ignore', process.env.DBG_AGENT ? 'inherit' : 'ignore'],
      env: { ...process.env, EMBERS_REDIS_URL: p.redisUrl, EMBERS_S3_ENDPOINT: p.s3Endpoint, EMBERS_DATA_DIR: dataDir, EMBERS_NODE_SLOTS: '2' },
    });
    await eventually(async () => (await p.redis().scard(keys.nodes)) >= 2, 'the second node to join');
    const nodeB = (await p.redis().smembers(keys.nodes)).find((id) => id !== p.agent.id)!;

    // Enough held requests that sleepy runs replicas on both nodes (target 1 each, at most 3).
    const pending = Array.from({ length: 6 }, (_, i) => call('sleepy', { ms: 3_000, tag: `held-${i}` }));
    const onB = await eventually(async () => {
      // (No group until the first replica reads.)
      const [, , , consumers] = ((await p.redis().xpending(liveStream('sleepy'), LIVE_GROUP).catch(() => [])) ?? []) as [number, unknown, unknown, [string, string][] | null];
      for (const [id] of consumers ?? []) {
        const raw = await p.redis().get(keys.replica(id));
        const r = raw ? (JSON.parse(raw) as ReplicaRecord) : null;
        if (r?.node === nodeB) return r;
      }
      return null;
    }, 'a replica on the second node holding requests', 60_000);
    // The whole node at once: its agent and replicas, no goodbye.
    process.kill(-agent.pid!, 'SIGKILL');
    const results = await Promise.all(pending);
    assert.deepEqual(results.map((r) => r.status), [200, 200, 200, 200, 200, 200]);
    const bodies = (await Promise.all(results.map((r) => r.json()))) as { tag: string; pid: number }[];
    assert.deepEqual(bodies.map((b) => b.tag).sort(), ['held-0', 'held-1', 'held-2', 'held-3', 'held-4', 'held-5']);
    assert.ok(bodies.every((b) => b.pid !== onB.pid), `none answered by the dead node's replica: ${JSON.stringify(bodies)}`);
    const consumers = async () => ((await p.redis().xinfo('CONSUMERS', liveStream('sleepy'), LIVE_GROUP)) as string[][]).map((c) => c[1]);
    await eventually(async () => !(await consumers()).includes(onB.id), 'the dead replica to leave the group', 20_000);
  });
});
