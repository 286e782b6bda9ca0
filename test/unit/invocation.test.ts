// The user code's invocation without onnxruntime or a replica: a handler bundle on disk, a fake
// model that doubles its input, and requests run through UserCode as the user-code process runs
// them (input check, handler, dynamic batching, answer and timing).
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { pathToFileURL } from 'node:url';
import pino from 'pino';
import { tensor, type Feeds } from '../../native/tensor.ts';
import type { AssignMessage, RunMessage } from '../../runtime/channel/messages.ts';
import { UserCode, type ModelRunner } from '../../runtime/user-code/user-code.ts';

const SDK = pathToFileURL(path.resolve(import.meta.dirname, '../../sdk/index.ts')).href;

/** A model that doubles `x`, and says how many rows each of its runs held. */
function doubler(runs: number[]): ModelRunner {
  return {
    provider: 'cpu',
    fallback: undefined,
    instances: 1,
    lone: undefined,
    inputNames: ['x'],
    outputNames: ['y'],
    wantsInline: false,
    async run(feeds: Feeds) {
      const x = feeds.x;
      runs.push(x.dims[0]);
      return { outputs: { y: tensor('float32', (x.data as Float32Array).map((v) => v * 2), x.dims) }, inferMs: 1, wide: false, lone: false };
    },
    noteLone() {},
    grow() {},
    async loadInline() {},
    async close() {},
  };
}

describe('invocation with a fake model set', () => {
  let dir: string;
  let user: UserCode;
  const runs: number[] = [];
  let n = 0;
  const request = (input: unknown, o: Partial<RunMessage> = {}): RunMessage => ({ type: 'run', n: ++n, rid: `r${n}`, input, batch: false, queueMs: 0, ...o });

  before(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'embers-invocation-'));
    const bundlePath = path.join(dir, 'bundle.mjs');
    await writeFile(
      bundlePath,
      `import { defineFunction, tensor, z, HandlerError } from ${JSON.stringify(SDK)};
export default defineFunction({
  name: 'double',
  input: z.object({ values: z.array(z.number()).min(1) }),
  models: { doubler: 's3://bucket/doubler.onnx' },
  async handler({ values }, { models }) {
    if (values[0] < 0) throw new HandlerError(422, 'values must not start below zero', 'negative');
    const out = await models.doubler.run({ x: tensor('float32', Float32Array.from(values), [values.length, 1]) });
    return { doubled: [...out.y.data] };
  },
});
`,
    );
    user = new UserCode({ log: pino({ level: 'silent' }), onStuck: () => {}, openModel: async () => doubler(runs) });
    const assign: AssignMessage = {
      type: 'assign',
      replica: 'test',
      env: {},
      fn: { name: 'double', version: 'v1', timeoutMs: 5_000, batching: { maxBatchSize: 16, maxDelayMs: 20 }, env: {} },
      bundlePath,
      models: { doubler: { path: path.join(dir, 'unused.onnx'), bytes: 1 } },
      settings: { providers: ['cpu'], threads: 1, instances: 1, wideThreads: 0, batchYieldMs: 0, handlerGraceMs: 1_000, maxAnswerBytes: 1 << 20 },
    };
    await user.start(assign);
  });

  after(async () => {
    await user.close();
    await rm(dir, { recursive: true, force: true });
  });

  it('runs the handler on the fake model and answers JSON with its timing', async () => {
    const r = await user.run(request({ values: [1, 2, 3] }));
    assert.equal(r.status, 200);
    assert.deepEqual(JSON.parse(r.body), { doubled: [2, 4, 6] });
    assert.ok(r.timing.handlerMs >= 0 && r.timing.inferMs >= 0);
  });

  it('batches concurrent calls into one inference and splits the answers back', async () => {
    runs.length = 0;
    const answers = await Promise.all([[1], [2, 3], [4]].map((values) => user.run(request({ values }))));
    assert.deepEqual(answers.map((a) => JSON.parse(a.body).doubled), [[2], [4, 6], [8]]);
    assert.ok(runs.length < 3, `three calls rode fewer inferences: ${runs}`);
    assert.equal(runs.reduce((a, b) => a + b, 0), 4);
  });

  it('answers 400 for input the schema refuses, without calling the handler', async () => {
    runs.length = 0;
    const r = await user.run(request({ values: [] }));
    assert.equal(r.status, 400);
    assert.equal(JSON.parse(r.body).error.code, 'invalid_input');
    assert.deepEqual(runs, []);
  });

  it("answers a HandlerError with its status and code", async () => {
    const r = await user.run(request({ values: [-1] }));
    assert.equal(r.status, 422);
    assert.equal(JSON.parse(r.body).error.code, 'negative');
  });
});
