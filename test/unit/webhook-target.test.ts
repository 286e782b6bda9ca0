// Which webhook targets are refused: loopback, private, link-local and other non-public addresses.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { isNotPublic, refusedHost, refusedTarget } from '../../core/webhook-target.ts';

describe('webhook targets', () => {
  it('tells public addresses from the others, v4, v6 and v4-mapped', () => {
    for (const ip of ['127.0.0.1', '10.0.0.5', '172.20.1.1', '192.168.1.1', '169.254.169.254', '100.64.0.1', '0.0.0.0', '::1', '::', 'fd00::1', 'fe80::1', '::ffff:127.0.0.1', '::ffff:10.0.0.1', 'not an ip']) assert.equal(isNotPublic(ip), true, ip);
    // IPv6 forms that wrap an IPv4 address (compatible, translated, 6to4), site-local and discard.
    for (const ip of ['::7f00:1', '::127.0.0.1', '::ffff:0:7f00:1', '2002:7f00:1::1', '2002:a9fe:a9fe::1', 'fec0::1', '100::1']) assert.equal(isNotPublic(ip), true, ip);
    for (const ip of ['8.8.8.8', '1.1.1.1', '2606:4700:4700::1111', '::ffff:8.8.8.8']) assert.equal(isNotPublic(ip), false, ip);
  });

  it('refuses by host alone an IP literal that is not public, and localhost', () => {
    assert.match(refusedHost(new URL('http://[::1]:80/x'))!, /not a public address/);
    assert.match(refusedHost(new URL('http://localhost/x'))!, /this machine/);
    assert.match(refusedHost(new URL('http://app.localhost/x'))!, /this machine/);
    assert.equal(refusedHost(new URL('https://example.com/x')), null);
    assert.equal(refusedHost(new URL('https://8.8.8.8/x')), null);
  });

  it('resolves a name and refuses one that points inside', async () => {
    // localhost is refused by name before any lookup; an IP literal needs none.
    assert.match((await refusedTarget(new URL('http://localhost:1/x')))!, /this machine/);
    assert.match((await refusedTarget(new URL('http://127.0.0.2/x')))!, /not a public address/);
    assert.equal(await refusedTarget(new URL('http://8.8.4.4/x')), null);
  });
});
