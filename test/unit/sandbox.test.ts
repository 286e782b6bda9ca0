// The sandbox's command line and the checks on what a user-code process answers: pure logic.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { sandboxCommand } from '../../runtime/replica/sandbox.ts';
import { checkResult } from '../../runtime/replica/user-code-process.ts';

const limits = { memoryBytes: 256 << 20, pids: 128, openFiles: 1024, tmpBytes: 8 << 20 };

describe('sandboxCommand', () => {
  const spec = { node: ['/usr/bin/node', '/opt/main.mjs'], mounts: [{ from: '/srv/node_modules', to: '/opt/embers/app/node_modules' }, { from: '/data/staging/r1', to: '/opt/embers/fn' }], devices: [], limits, uid: 2_000_123, cgroupProcs: ['/sys/fs/cgroup/memory/embers/r1/cgroup.procs'], isolate: true };

  it('joins the cgroups, sets rlimits, drops to its uid, then isolates every namespace', () => {
    const { command, args, input } = sandboxCommand(spec);
    assert.equal(command, 'sh');
    const rest = args.slice(args.indexOf('--') + 1);
    assert.deepEqual(args.slice(3, args.indexOf('--')), spec.cgroupProcs);
    assert.equal(rest[0], 'prlimit');
    assert.ok(rest.includes('--nofile=1024') && rest.includes('--nproc=128') && rest.includes('--core=0'));
    assert.ok(rest.includes('--reuid=2000123') && rest.includes('--clear-groups'));
    // bwrap reads its options from stdin: the command line, which the sandbox sees as /proc/1/cmdline, names no host path.
    assert.deepEqual(rest.slice(rest.indexOf('bwrap')), ['bwrap', '--args', '0', '--', '/usr/bin/node', '/opt/main.mjs']);
    assert.ok(!args.some((a) => a.startsWith('/data') || a.startsWith('/srv')), args.join(' '));
    const bwrap = input.toString().split('\0');
    assert.equal(bwrap.pop(), '', 'each option ends with a NUL');
    for (const flag of ['--unshare-all', '--die-with-parent', '--new-session']) assert.ok(bwrap.includes(flag), flag);
    // A private /tmp of the given size, and only what is bound read-only.
    const tmp = bwrap.indexOf('--tmpfs');
    assert.deepEqual(bwrap.slice(tmp - 2, tmp + 2), ['--size', String(8 << 20), '--tmpfs', '/tmp']);
    assert.ok(!bwrap.includes('--bind'), 'nothing is bound writable');
    assert.deepEqual(bwrap.slice(-2), ['--chdir', '/tmp']);
    const fn = bwrap.indexOf('/data/staging/r1');
    assert.deepEqual(bwrap.slice(fn - 1, fn + 2), ['--ro-bind', '/data/staging/r1', '/opt/embers/fn']);
  });

  it('without isolation (a host that cannot), keeps the limits and runs node directly', () => {
    const { args, input } = sandboxCommand({ ...spec, isolate: false, uid: undefined, cgroupProcs: [] });
    assert.ok(!args.includes('bwrap') && !args.includes('setpriv'));
    assert.equal(input.length, 0);
    assert.deepEqual(args.slice(-2), ['/usr/bin/node', '/opt/main.mjs']);
  });
});

describe('checkResult', () => {
  const ok = { type: 'result' as const, n: 1, status: 200, body: '{"a":1}', timing: { queueMs: 1, handlerMs: 2, inferMs: 0, batchMs: 0, execMs: 0, inputMs: 0, outputMs: 0 } };
  const code = (r: { body: string }) => (JSON.parse(r.body) as { error: { code: string } }).error.code;

  it('takes a well-formed answer as it is', () => {
    assert.deepEqual(checkResult(ok, 1024), { status: 200, body: '{"a":1}', bytes: undefined, timing: { queueMs: 1, handlerMs: 2, inferMs: 0, execMs: 0, batchMs: 0, inputMs: 0, outputMs: 0 }, canceled: undefined });
  });

  it('refuses statuses, bodies, content types and sizes a handler cannot give', () => {
    for (const bad of [
      { ...ok, status: 101 },
      { ...ok, status: 200.5 },
      { ...ok, status: 600 },
      { ...ok, body: 42 as unknown as string },
      { ...ok, body: 'x'.repeat(2000) },
    ]) {
      const r = checkResult(bad, 1024);
      assert.equal(r.status, 500);
      assert.equal(code(r), 'invalid_answer');
    }
    const png = Buffer.from('png!');
    for (const [bytes, data] of [
      [{ contentType: 'text/plain\r\nset-cookie: a=b', length: 4 }, png],
      [{ contentType: 'image/png', length: 5 }, png],
      [{ contentType: 'image/png', length: 4 }, undefined],
      [{ contentType: 'image/png', length: 4096 }, Buffer.alloc(4096)],
      [{ contentType: 'application/octet-stream', length: 4, headerLength: 5 }, png],
    ] as const) {
      const r = checkResult({ ...ok, bytes }, 1024, data);
      assert.equal(r.status, 500, JSON.stringify(bytes));
      assert.equal(code(r), 'invalid_answer');
    }
  });

  it('takes bytes from the byte channel within the bound, with an inference header length inside them', () => {
    const r = checkResult({ ...ok, bytes: { contentType: 'image/png', length: 4, headerLength: 2 } }, 1024, Buffer.from('png!'));
    assert.deepEqual([r.status, r.bytes?.contentType, r.bytes?.data.toString(), r.bytes?.headerLength], [200, 'image/png', 'png!', 2]);
  });

  it('drops timing values that are not finite, non-negative numbers', () => {
    const r = checkResult({ ...ok, timing: { queueMs: -1, handlerMs: Number.NaN, inferMs: 'x' as unknown as number, batchMs: 3, execMs: 0, inputMs: 0, outputMs: 0 } }, 1024);
    assert.deepEqual(r.timing, { queueMs: 0, handlerMs: 0, inferMs: 0, execMs: 0, batchMs: 3, inputMs: 0, outputMs: 0 });
  });
});
