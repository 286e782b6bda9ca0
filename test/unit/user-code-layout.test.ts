// Where the user-code process finds the platform's code in its sandbox: pure logic.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { INSIDE_NODE_MODULES, userCodeLaunch } from '../../runtime/replica/user-code-layout.ts';

const flags = ['--initial-heap-size=128'];
const fromSource = { execPath: '/usr/bin/node', execArgv: flags, entry: '/home/me/embers/runtime/user-code/main.ts', tsx: 'file:///home/me/embers/node_modules/tsx/dist/loader.mjs', root: '/home/me/embers', nodeModules: '/home/me/embers/node_modules' };
const prebuilt = { execPath: '/home/me/.nvm/versions/node/v22/bin/node', execArgv: flags, entry: '/var/embers/cache/runtime/abc/user-main.mjs', root: '/home/me/embers', nodeModules: '/home/me/embers/node_modules' };
const hostPath = /\/home\/|\/var\//;

describe('userCodeLaunch', () => {
  it('from source, binds the code and packages at fixed paths and starts node with those', () => {
    const { node, mounts } = userCodeLaunch(fromSource, true);
    assert.deepEqual(node, ['/usr/bin/node', ...flags, '--import', `file://${INSIDE_NODE_MODULES}/tsx/dist/loader.mjs`, '/opt/embers/app/runtime/user-code/main.ts']);
    assert.deepEqual(mounts.find((m) => m.from === '/home/me/embers/runtime'), { from: '/home/me/embers/runtime', to: '/opt/embers/app/runtime' });
    assert.deepEqual(mounts.find((m) => m.from === fromSource.nodeModules)?.to, INSIDE_NODE_MODULES);
    assert.ok(!node.some((a) => hostPath.test(a)), node.join(' '));
  });

  it('prebuilt, binds only the entry and the session worker beside it, and a node outside /usr', () => {
    const { node, mounts } = userCodeLaunch(prebuilt, true);
    assert.deepEqual(node, ['/opt/embers/node/bin/node', ...flags, '/opt/embers/app/runtime/user-main.mjs']);
    assert.deepEqual(mounts.map((m) => m.to).sort(), ['/opt/embers/app/node_modules', '/opt/embers/app/runtime/session-worker.mjs', '/opt/embers/app/runtime/user-main.mjs', '/opt/embers/node']);
    assert.deepEqual(mounts.find((m) => m.to === '/opt/embers/node')?.from, '/home/me/.nvm/versions/node/v22');
  });

  it('without a sandbox, starts node with the host paths and binds nothing', () => {
    assert.deepEqual(userCodeLaunch(fromSource, false), { node: ['/usr/bin/node', ...flags, '--import', fromSource.tsx, fromSource.entry], mounts: [] });
  });

  it('refuses a loader outside the packages it binds', () => {
    assert.throws(() => userCodeLaunch({ ...fromSource, tsx: 'file:///opt/tsx/loader.mjs' }, true), /not under/);
  });
});
