// Where webhooks may go. A webhook carries a tenant's job output and is POSTed from inside the
// platform's network, so by default it may not reach loopback, private, link-local (cloud
// metadata) or other non-public addresses (EMBERS_WEBHOOK_ALLOW_PRIVATE=1 allows them, e.g. for
// receivers on the same machine in development).
import { lookup } from 'node:dns/promises';
import { BlockList, isIP } from 'node:net';

const NOT_PUBLIC = new BlockList();
for (const [net, bits] of [
  ['0.0.0.0', 8], ['10.0.0.0', 8], ['100.64.0.0', 10], ['127.0.0.0', 8], ['169.254.0.0', 16], ['172.16.0.0', 12],
  ['192.0.0.0', 24], ['192.0.2.0', 24], ['192.168.0.0', 16], ['198.18.0.0', 15], ['198.51.100.0', 24], ['203.0.113.0', 24], ['224.0.0.0', 3],
] as const) NOT_PUBLIC.addSubnet(net, bits, 'ipv4');
// IPv4-compatible (::a.b.c.d), IPv4-translated (::ffff:0:a.b.c.d) and 6to4 (2002::/16) forms can
// wrap any IPv4 address, loopback and metadata included; site-local and discard are not public.
for (const [net, bits] of [['::', 96], ['::1', 128], ['::ffff:0:0:0', 96], ['2002::', 16], ['100::', 64], ['fc00::', 7], ['fe80::', 10], ['fec0::', 10], ['ff00::', 8], ['64:ff9b::', 96], ['2001:db8::', 32]] as const) NOT_PUBLIC.addSubnet(net, bits, 'ipv6');

/** Whether `ip` (v4 or v6, v4-mapped v6 included) is outside the public internet. */
export function isNotPublic(ip: string): boolean {
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(ip);
  if (mapped) return NOT_PUBLIC.check(mapped[1], 'ipv4');
  const family = isIP(ip);
  if (family === 0) return true;
  return NOT_PUBLIC.check(ip, family === 4 ? 'ipv4' : 'ipv6');
}

/** Why a webhook to `url` may not be sent judged by its host alone (an IP literal or localhost), or null. */
export function refusedHost(url: URL): string | null {
  const host = url.hostname.replace(/^\[|\]$/g, '');
  if (host === 'localhost' || host.endsWith('.localhost')) return `${host} is this machine`;
  if (isIP(host) && isNotPublic(host)) return `${host} is not a public address`;
  return null;
}

/** Why a webhook to `url` may not be sent, its host resolved, or null when it may. */
export async function refusedTarget(url: URL): Promise<string | null> {
  const byHost = refusedHost(url);
  if (byHost || isIP(url.hostname.replace(/^\[|\]$/g, ''))) return byHost;
  const addresses = await lookup(url.hostname, { all: true, verbatim: true });
  const inside = addresses.find((a) => isNotPublic(a.address));
  return inside ? `${url.hostname} resolves to ${inside.address}, which is not a public address` : null;
}
