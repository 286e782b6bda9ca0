// Which versions of a function take its requests: the active version on the function's own key,
// and at most one more, with a share of them, on its version key (core/names.ts `versionKey`).
// What a request asks for is decided here, purely; the registry stores it (Registry.route).
import { createHash } from 'node:crypto';

/** The second version of a split and its share; the active version takes the rest. */
export interface TrafficSplit {
  version: string;
  /** Its share of requests, 1–99 %. */
  percent: number;
  since: string;
  /** An automatic rollout moves it step by step (scheduler/rollouts.ts): its step in ROLLOUT_STEPS and when that step began (ms). */
  auto?: { step: number; stepStartedAt: number };
}

/** How the last automatic rollout ended, shown until the next one. */
export interface RolloutOutcome {
  version: string;
  /** The version it was measured against. */
  from: string;
  outcome: 'promoted' | 'rolled_back';
  reason: string;
  at: string;
}

/** A function's traffic: its active version, the one before it (rollback's default), a split, the last rollout. */
export interface Routing {
  active: string;
  previous: string | null;
  split: TrafficSplit | null;
  rollout: RolloutOutcome | null;
}

/** The shares an automatic rollout gives the new version, one step after another; the last makes it active. */
export const ROLLOUT_STEPS = [10, 50, 100] as const;

/** A request the caller must change: its status, code and what to do. */
export class TrafficError extends Error {
  constructor(
    readonly status: 400 | 404 | 409,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

/** What a traffic request comes to: the active version, and the other one with its share if any. */
export interface TrafficPlan {
  active: string;
  split: { version: string; percent: number } | null;
}

/**
 * The plan for `shares` (version → whole percent) of function `name` (shown in messages), whose
 * versions are `versions` and active version `active`. One version at 100 % becomes the active
 * one. Of two, the active version stays on the function's key when it is one of them (its warm
 * replicas keep serving); otherwise the larger share (the first named on a tie) becomes active.
 */
export function planTraffic(name: string, shares: Record<string, number>, active: string, versions: string[]): TrafficPlan {
  const named = Object.entries(shares);
  const example = `e.g. {"${versions.at(-1) ?? 'v2'}": 10, "${active}": 90}`;
  if (named.length === 0) throw new TrafficError(400, 'invalid_traffic', `name one or two versions of ${name} with their shares in percent, ${example}`);
  if (named.length > 2) throw new TrafficError(400, 'too_many_versions', `traffic is split between at most two versions; got ${named.map(([v]) => v).join(', ')}`);
  for (const [version, percent] of named) {
    if (!versions.includes(version)) throw new TrafficError(404, 'version_not_found', `${name} has no version "${version}"; it has ${versions.join(', ')} (\`embers versions list ${name}\`)`);
    if (!Number.isInteger(percent) || percent < 0 || percent > 100) throw new TrafficError(400, 'invalid_traffic', `the share of ${version} must be a whole percent from 0 to 100, got ${percent}`);
  }
  const total = named.reduce((a, [, p]) => a + p, 0);
  if (total !== 100) throw new TrafficError(400, 'split_not_100', `the shares must add up to 100 %, these add up to ${total} % (${named.map(([v, p]) => `${v}=${p}%`).join(' ')})`);
  const taking = named.filter(([, p]) => p > 0);
  if (taking.length === 1) return { active: taking[0][0], split: null };
  const [a, b] = taking;
  const primary = a[0] === active || (b[0] !== active && a[1] >= b[1]) ? a : b;
  const second = primary === a ? b : a;
  return { active: primary[0], split: { version: second[0], percent: second[1] } };
}

/**
 * The bucket (0–99) of a request to function `key`: from the caller's Embers-Version-Key when it
 * sends one, so that the caller keeps its version on every gateway (and keeps it as the share of
 * the new version grows); at random otherwise.
 */
export function trafficBucket(key: string, callerKey: string | undefined, random: () => number = Math.random): number {
  if (callerKey === undefined || callerKey === '') return Math.floor(random() * 100);
  return createHash('sha256').update(`${key}\n${callerKey}`).digest().readUInt32BE(0) % 100;
}

/** Whether a request in `bucket` goes to the split's version rather than the active one. */
export function toSplit(split: Pick<TrafficSplit, 'percent'> | null | undefined, bucket: number): boolean {
  return split !== null && split !== undefined && bucket < split.percent;
}

/** Each version's share now, for listing: the active version's and the split's. */
export function sharesOf(r: Pick<Routing, 'active' | 'split'>): Record<string, number> {
  return r.split ? { [r.active]: 100 - r.split.percent, [r.split.version]: r.split.percent } : { [r.active]: 100 };
}
