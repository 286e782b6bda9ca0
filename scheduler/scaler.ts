// The scaling decision, as a pure function of state, observation and clock (Knative KPA's
// stable/panic windows, Ray Serve's target ongoing requests). No I/O: the scheduler feeds it.
import { AUTO_IDLE_BOUND_S } from '../core/contracts.ts';
import { keepAliveWindow, recordIdle, warmAt, type KeepAlive } from './keep-alive.ts';

export interface ScalingPolicy {
  minReplicas: number;
  maxReplicas: number;
  /** In-flight requests one replica should hold. */
  targetConcurrency: number;
  /** Keep-alive after the last request, learned (keep-alive.ts) up to this many seconds; 'auto': up to AUTO_IDLE_BOUND_S. */
  idleTimeoutS: number | 'auto';
}

export interface ScalerSettings {
  /** Averaging window for the steady decision; also how long scale-down waits. @default 60 s */
  stableWindowMs: number;
  /** Short window that reacts at once to bursts. @default 6 s */
  panicWindowMs: number;
  /** Panic when the short-window want reaches this multiple of the replicas ready. @default 2 */
  panicThreshold: number;
  /** 'fixed': keep-alive is the bound itself, never learned (EMBERS_KEEP_ALIVE). @default 'auto' */
  keepAlive?: 'auto' | 'fixed';
  /** How early a pre-warm starts before the window it serves (a cold start's time). @default 0 */
  prewarmLeadMs?: number;
}

export const DEFAULT_SCALER_SETTINGS: ScalerSettings = { stableWindowMs: 60_000, panicWindowMs: 6_000, panicThreshold: 2 };

export interface ScalerState {
  samples: { t: number; inFlight: number }[];
  desired: number;
  /** Last time the desired count went up (scale-down waits a stable window after it). */
  lastScaleUpAt: number;
  /** Last time any work was in flight, or null if never. */
  lastActiveAt: number | null;
  /** Panic mode lasts until this time. */
  panicUntil: number;
  /** The function's recent idle times (ms from the end of its work to its next request), oldest first. */
  idleMs: number[];
  /** Its replica was reclaimed for another function: none again until it has work. */
  reclaimed?: boolean;
  /** The lastTakenAt last observed (null: none taken yet; absent: not observed yet). */
  takenSeen?: number | null;
}

export interface Observation {
  now: number;
  /** Waiting + running requests of the function, summed over the cluster. */
  inFlight: number;
  /** When a replica last took one of its live requests (ms since the epoch, Redis's clock); null: none yet; undefined: could not be read. */
  lastTakenAt?: number | null;
  /** Replicas ready to serve now. */
  ready: number;
  /** Most replicas of this function the nodes can fit (their free slots plus what it holds). */
  capacity: number;
}

export interface Decision {
  desired: number;
  /** What it would be with room on the nodes (before the capacity cap). */
  wanted: number;
  state: ScalerState;
  reason: string;
}

/**
 * Until when keep-alive may still want a replica of a function with no work (a pre-warm to come,
 * or a keep-alive under way); null: not at all.
 */
export function keepAliveEndsAt(state: ScalerState, policy: ScalingPolicy, settings: ScalerSettings = DEFAULT_SCALER_SETTINGS): number | null {
  if (state.lastActiveAt === null || state.reclaimed) return null;
  const k = keepAliveFor(state.idleMs, policy, settings);
  return state.lastActiveAt + k.prewarmMs + k.keepAliveMs;
}

function keepAliveFor(idleMs: readonly number[], policy: ScalingPolicy, settings: ScalerSettings): KeepAlive {
  const boundMs = (policy.idleTimeoutS === 'auto' ? AUTO_IDLE_BOUND_S : policy.idleTimeoutS) * 1000;
  if (settings.keepAlive === 'fixed') return { prewarmMs: 0, keepAliveMs: boundMs, why: 'fixed' };
  // A number given is also the window until there is enough to learn from.
  return policy.idleTimeoutS === 'auto' ? keepAliveWindow(idleMs, boundMs) : keepAliveWindow(idleMs, boundMs, boundMs);
}

export function initialScalerState(): ScalerState {
  return { samples: [], desired: 0, lastScaleUpAt: -Infinity, lastActiveAt: null, panicUntil: -Infinity, idleMs: [] };
}

function mean(samples: { inFlight: number }[]): number {
  return samples.length ? samples.reduce((a, s) => a + s.inFlight, 0) / samples.length : 0;
}

export function decide(prev: ScalerState, obs: Observation, policy: ScalingPolicy, settings: ScalerSettings = DEFAULT_SCALER_SETTINGS): Decision {
  const { now } = obs;
  const samples = [...prev.samples.filter((s) => s.t > now - settings.stableWindowMs), { t: now, inFlight: obs.inFlight }];
  // A request that came and went between two observations shows only in lastTakenAt. It is
  // compared with the last one seen as Redis gave it, and used as a time only clamped to this
  // clock's now. The first observation only sets where to count from: what replicas took before
  // this scheduler looked (a restart, a new leader) is not activity.
  const raw = obs.lastTakenAt;
  const takenAt = raw != null && prev.takenSeen !== undefined && raw > (prev.takenSeen ?? -Infinity) ? Math.min(raw, now) : null;
  const arrived = (obs.inFlight > 0 && (prev.samples.at(-1)?.inFlight ?? 0) === 0) || takenAt !== null;
  const lastActiveAt = obs.inFlight > 0 ? now : takenAt !== null ? Math.max(takenAt, prev.lastActiveAt ?? -Infinity) : prev.lastActiveAt;
  const target = Math.max(1, policy.targetConcurrency);
  const stableWant = Math.ceil(mean(samples) / target);
  const panicRatio = mean(samples.filter((s) => s.t > now - settings.panicWindowMs)) / target;
  const panicWant = Math.ceil(panicRatio);

  // Panic when the short window's load is twice what the ready replicas are sized for, judged
  // unrounded as Knative does (rounded up first, 33 in flight against a target of 32 read as 2
  // replicas' worth and panicked one ready replica at barely over its target).
  let panicUntil = prev.panicUntil;
  if (panicRatio >= settings.panicThreshold * Math.max(1, obs.ready) && panicWant > prev.desired) panicUntil = now + settings.stableWindowMs;
  const panicking = now < panicUntil;

  let want: number;
  let reason: string;
  if (panicking) {
    // In panic, follow the short window up, never down.
    want = Math.max(prev.desired, panicWant, stableWant);
    reason = `panic: ${panicWant} wanted over the last ${settings.panicWindowMs / 1000} s`;
  } else {
    want = stableWant;
    reason = `stable: ${stableWant} wanted over the last ${settings.stableWindowMs / 1000} s`;
  }
  // The stable window paces scale-down from N to N−1; the way to zero is keep-alive's alone
  // (Knative keeps its scale-to-zero grace apart from its stable window too).
  if (want < prev.desired && want > 0 && now - prev.lastScaleUpAt < settings.stableWindowMs) {
    want = prev.desired;
    reason = 'holding: scale-down waits a stable window after the last scale-up';
  }
  // Keep-alive: after the last request, a replica is kept (or pre-warmed) only while the
  // function's next request is likely to come (keep-alive.ts).
  // One idle time per observation at most: arrivals closer than the scheduler's tick count as one.
  const idleMs =
    arrived && prev.lastActiveAt !== null && (prev.samples.at(-1)?.inFlight ?? 0) === 0
      ? recordIdle(prev.idleMs, Math.max(0, (takenAt ?? now) - prev.lastActiveAt))
      : prev.idleMs;
  const k = keepAliveFor(idleMs, policy, settings);
  const reclaimed = obs.inFlight > 0 ? false : (prev.reclaimed ?? false);
  if (obs.inFlight === 0) {
    const warm = lastActiveAt !== null && !reclaimed && warmAt(k, now - lastActiveAt, settings.prewarmLeadMs ?? 0);
    const until = Math.round((k.prewarmMs + k.keepAliveMs) / 1000);
    if (!warm && want > 0) {
      want = 0;
      reason = lastActiveAt === null ? 'never used' : reclaimed ? 'reclaimed for a function with work; back with its next request' : `keep-alive over (${k.why}: warm until ${until} s after the last request): to zero`;
    } else if (warm && want === 0) {
      want = 1;
      reason = k.prewarmMs > 0 && prev.desired === 0 ? `pre-warming: its next request is expected ${Math.round(k.prewarmMs / 1000)}–${until} s after its last` : `keeping one replica (${k.why} keep-alive: until ${until} s after the last request)`;
    }
  }
  if (obs.inFlight > 0 && want === 0) {
    // The queue holds the request while a replica starts (Knative's activator).
    want = 1;
    reason = 'work waiting with no replica: start one';
  }
  let desired = Math.min(Math.max(want, policy.minReplicas), policy.maxReplicas);
  const wanted = desired;
  if (desired > obs.capacity) {
    desired = Math.max(obs.capacity, 0);
    reason += `; capped at node capacity ${obs.capacity}`;
  }
  if (desired !== want && desired === policy.maxReplicas) reason += `; capped at maxReplicas ${policy.maxReplicas}`;
  if (desired !== want && desired === policy.minReplicas) reason += `; held at minReplicas ${policy.minReplicas}`;
  return {
    desired,
    wanted,
    reason,
    state: { samples, desired, lastActiveAt, panicUntil, lastScaleUpAt: desired > prev.desired ? now : prev.lastScaleUpAt, idleMs, takenSeen: raw ?? (raw === null ? (prev.takenSeen ?? null) : prev.takenSeen), ...(reclaimed ? { reclaimed } : {}) },
  };
}
