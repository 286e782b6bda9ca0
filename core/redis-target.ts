// Which Redis every part talks to: one server by URL, or the primary that Sentinels name. Parts
// started by another part (replicas, by their agent) get it through the environment (redisEnv).
import type { RedisOptions } from 'ioredis';

export interface SentinelGroup {
  hosts: { host: string; port: number }[];
  /** The master group's name in the Sentinels' configuration. */
  name: string;
  /** The Sentinels' own password (their requirepass), when they have one. */
  password?: string;
  tls: boolean;
}

export interface RedisTarget {
  /**
   * A Redis URL. Under Sentinel its user, password, database and scheme (rediss: for TLS) are the
   * primary's; its host is not used: the Sentinels name the primary.
   */
  url: string;
  sentinel?: SentinelGroup;
  /**
   * Replicas that must hold accepted work (a job, a batch, a deploy) before the gateway says so
   * (Redis WAIT); 0: answer once the primary has it.
   */
  ackReplicas: number;
  /** How long the gateway waits for them before refusing the work with 503. */
  ackTimeoutMs: number;
}

/** What EMBERS_REDIS_SENTINELS takes: `host:port,host:port,…` (IPv6 hosts in brackets). */
export function parseSentinelHosts(text: string): { host: string; port: number }[] {
  const hosts = text
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean)
    .map((entry) => {
      const m = /^(?:\[([^\]]+)\]|([^:[\]]+)):(\d{1,5})$/.exec(entry);
      const port = m ? Number(m[3]) : NaN;
      if (!m || port < 1 || port > 65535) throw new Error(`"${entry}" is not host:port (e.g. sentinel-1:26379)`);
      return { host: m[1] ?? m[2], port };
    });
  if (!hosts.length) throw new Error('names no Sentinel (e.g. sentinel-1:26379,sentinel-2:26379,sentinel-3:26379)');
  return hosts;
}

/** ioredis options for `target` (merged under the caller's). */
export function connectionOptions(target: RedisTarget): RedisOptions {
  if (!target.sentinel) return {};
  const u = new URL(target.url);
  const tls = u.protocol === 'rediss:' ? {} : undefined;
  const s = target.sentinel;
  return {
    sentinels: s.hosts,
    name: s.name,
    username: u.username ? decodeURIComponent(u.username) : undefined,
    password: u.password ? decodeURIComponent(u.password) : undefined,
    db: Number(u.pathname.slice(1)) || 0,
    tls,
    sentinelPassword: s.password,
    enableTLSForSentinelMode: s.tls,
    sentinelTLS: s.tls ? {} : undefined,
    // Hears +switch-master from the Sentinels: a failover is followed at once, not when a
    // command to the old primary first fails.
    failoverDetector: true,
    // A client still on a demoted primary (it came back as a replica) reconnects through the
    // Sentinels and sends the refused command again.
    reconnectOnError: (err) => (err.message.startsWith('READONLY') ? 2 : false),
  };
}

/** The target as it may be printed: no password. */
export function describeRedis(target: RedisTarget): string {
  if (target.sentinel) return `primary "${target.sentinel.name}" of Sentinels ${target.sentinel.hosts.map((h) => `${h.host}:${h.port}`).join(',')}`;
  return withoutPassword(target.url);
}

/** The URL as it may be printed: a password in it is replaced. */
export function withoutPassword(url: string): string {
  try {
    const u = new URL(url);
    if (!u.password) return url;
    u.password = '***';
    return u.href;
  } catch {
    return url.replace(/\/\/[^@/]*@/, '//***@');
  }
}

/**
 * The EMBERS_REDIS_* variables that give a started process the same target; those that do not
 * apply are empty (unset for loadConfig), over whatever the starter's environment had.
 */
export function redisEnv(target: RedisTarget): Record<string, string> {
  const s = target.sentinel;
  return {
    EMBERS_REDIS_URL: target.url,
    EMBERS_REDIS_SENTINELS: s ? s.hosts.map((h) => (h.host.includes(':') ? `[${h.host}]:${h.port}` : `${h.host}:${h.port}`)).join(',') : '',
    EMBERS_REDIS_SENTINEL_NAME: s?.name ?? '',
    EMBERS_REDIS_SENTINEL_TLS: String(s?.tls ?? false),
    EMBERS_REDIS_SENTINEL_PASSWORD: s?.password ?? '',
  };
}

/** A single Redis at `url` (embedded, tests, benches): no Sentinel, no replica to wait for. */
export function plainTarget(url: string): RedisTarget {
  return { url, ackReplicas: 0, ackTimeoutMs: 0 };
}
