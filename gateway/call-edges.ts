// Which functions a function called (`ctx.call`) and was called by in the last hour, as its
// replicas record them (runtime/replica/calls.ts): read by GET /v1/functions/:name for the
// console, `embers functions show` and any program. Only the asking tenant's functions are named.
import type { Redis } from 'ioredis';
import { keys } from '../core/keys.ts';
import { baseKey, plainName } from '../core/names.ts';

/** How far back the lists reach, and how long each may be. */
export const CALLS_WINDOW_MS = 3600_000;
export const CALLS_SHOWN = 50;

/** One function at the other end of a call: its name as the tenant knows it, and its last call. */
export interface CallEdge {
  name: string;
  lastAt: string;
}

export interface CallEdges {
  out: CallEdge[];
  in: CallEdge[];
}

/**
 * The edges of the function whose keys are `fnKeys` (its own key, and the version keys its
 * replicas ran under while a version took a share of its traffic: edges are written under the key
 * a replica serves), newest first. An end is kept only when `owner` says `tenant` owns it, so
 * another tenant's function, or one since deleted, is never named.
 */
export async function callEdges(redis: Redis, fnKeys: string[], tenant: string, owner: (key: string) => Promise<string | null>, now = Date.now()): Promise<CallEdges> {
  const since = now - CALLS_WINDOW_MS;
  const pipe = redis.pipeline();
  for (const k of fnKeys) {
    pipe.zrevrangebyscore(keys.callsOut(k), '+inf', since, 'WITHSCORES', 'LIMIT', 0, CALLS_SHOWN);
    pipe.zrevrangebyscore(keys.callsIn(k), '+inf', since, 'WITHSCORES', 'LIMIT', 0, CALLS_SHOWN);
  }
  const res = (await pipe.exec()) ?? [];
  const failed = res.find(([err]) => err);
  if (failed) throw failed[0];
  const ends = { out: new Map<string, number>(), in: new Map<string, number>() };
  res.forEach(([, reply], i) => {
    const into = i % 2 === 0 ? ends.out : ends.in;
    const flat = reply as string[];
    for (let j = 0; j < flat.length; j += 2) {
      const key = baseKey(flat[j]);
      into.set(key, Math.max(into.get(key) ?? 0, Number(flat[j + 1])));
    }
  });
  const owners = new Map<string, Promise<string | null>>();
  const ownedBy = (key: string) => owners.get(key) ?? owners.set(key, owner(key)).get(key)!;
  const list = async (found: Map<string, number>): Promise<CallEdge[]> => {
    const owned = await Promise.all([...found].map(async ([key, at]) => ((await ownedBy(key)) === tenant ? { key, at } : null)));
    return owned
      .filter((e) => e !== null)
      .sort((a, b) => b.at - a.at)
      .slice(0, CALLS_SHOWN)
      .map((e) => ({ name: plainName(e.key), lastAt: new Date(e.at).toISOString() }));
  };
  const [out, into] = await Promise.all([list(ends.out), list(ends.in)]);
  return { out, in: into };
}
