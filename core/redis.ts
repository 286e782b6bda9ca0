import { createHash } from 'node:crypto';
import { Redis, type RedisOptions } from 'ioredis';
import { connectionOptions, plainTarget, type RedisTarget } from './redis-target.ts';

/**
 * A client of `target` (a URL: a single Redis). BullMQ needs maxRetriesPerRequest null on
 * blocking connections; we use it everywhere. Clients made with `duplicate()` keep the target.
 */
export function createRedis(target: RedisTarget | string, options: RedisOptions = {}): Redis {
  const defaults: RedisOptions = { maxRetriesPerRequest: null, enableReadyCheck: true, lazyConnect: false };
  const t = typeof target === 'string' ? plainTarget(target) : target;
  const client = t.sentinel ? new Redis({ ...defaults, ...connectionOptions(t), ...options }) : new Redis(t.url, { ...defaults, ...options });
  // Connection errors are retried by ioredis and surface as failed commands where they matter;
  // without a listener ioredis prints each one to stderr as "Unhandled error event".
  client.on('error', () => {});
  coalesceWrites(client);
  return client;
}

/**
 * Commands sent in one turn of the event loop leave in one socket write. ioredis writes each
 * command as it is sent, one syscall apiece; on these machines a write costs more CPU than the
 * command does in Redis. Corking the socket at the first command of a turn and uncorking it in
 * the turn's check phase (setImmediate: after every I/O callback of the turn has run) sends them
 * together, at no added wait: nothing else would have run before the check phase anyway.
 */
function coalesceWrites(client: Redis): void {
  const send = client.sendCommand.bind(client);
  let corked: Redis['stream'] | undefined;
  const uncork = () => {
    const socket = corked;
    corked = undefined;
    socket?.uncork();
  };
  uncorkers.set(client, uncork);
  client.sendCommand = ((command, stream) => {
    const socket = client.stream;
    if (!corked && !stream && client.status === 'ready' && socket) {
      socket.cork();
      corked = socket;
      setImmediate(uncork);
    }
    return send(command, stream);
  }) as typeof client.sendCommand;
}

const uncorkers = new WeakMap<Redis, () => void>();

/**
 * Writes what `client` holds back for the end of this turn now. For a command sent from the check
 * phase itself (a batch gathered over the turn): held back, it would wait for the next turn's.
 */
export function flushWrites(client: Redis): void {
  uncorkers.get(client)?.();
}

/**
 * Runs a Lua script by its SHA1 (EVALSHA), loading it with EVAL only when Redis does not have it
 * yet (first call, or after a restart): the script text is not sent on every request.
 */
export async function evalScript(redis: Redis, script: string, numKeys: number, ...args: (string | number | Buffer)[]): Promise<unknown> {
  let sha = shas.get(script);
  if (!sha) shas.set(script, (sha = createHash('sha1').update(script).digest('hex')));
  try {
    return await redis.evalsha(sha, numKeys, ...args);
  } catch (err) {
    if (!String((err as Error).message).startsWith('NOSCRIPT')) throw err;
    return redis.eval(script, numKeys, ...args);
  }
}

const shas = new Map<string, string>();

export type { Redis };

/**
 * Waits until `target.ackReplicas` replicas hold every write `client` sent so far (Redis WAIT);
 * false when fewer confirmed in `target.ackTimeoutMs`. True at once where none is asked for.
 */
export async function replicated(client: Redis, target: RedisTarget): Promise<boolean> {
  if (target.ackReplicas <= 0) return true;
  const acked = Number(await client.wait(target.ackReplicas, target.ackTimeoutMs));
  return acked >= target.ackReplicas;
}

export interface Replication {
  /** The address `client` is connected to (under Sentinel: the primary it was given). */
  address: string;
  role: string;
  /** Replicas connected to it. */
  replicas: number;
}

/** Who `client` talks to and how many replicas that server has (INFO replication). */
export async function replicationOf(client: Redis): Promise<Replication> {
  const info = await client.info('replication');
  const field = (name: string) => new RegExp(`^${name}:(.*)$`, 'm').exec(info)?.[1]?.trim();
  const socket = client.stream;
  const address = socket?.remoteAddress ? `${socket.remoteAddress.includes(':') ? `[${socket.remoteAddress}]` : socket.remoteAddress}:${socket.remotePort}` : 'unknown';
  return { address, role: field('role') ?? 'unknown', replicas: Number(field('connected_slaves')) || 0 };
}
