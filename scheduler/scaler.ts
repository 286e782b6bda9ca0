// The scaling decision, as a pure function of state, observation and clock (Knative KPA's
// stable/panic windows, Ray Serve's target ongoing requests). No I/O: the scheduler feeds it.

export interface ScalingPolicy {
  minReplicas: number;
  maxReplicas: number;
  /** In-flight requests one replica should hold. */
  targetConcurrency: number;
  /** Seconds without in-flight work before the function may go to zero. */
  idleTimeoutS: number;
}

export interface ScalerSettings {
  /** Averaging window for the steady decision; also how long scale-down waits. @default 60 s */
  stableWindowMs: number;
  /** Short window that reacts at once to bursts. @default 6 s */
  panicWindowMs: number;
  /** Panic when the short-window want reaches this multiple of the replicas ready. @default 2 */
  panicThreshold: number;
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
}

export interface Observation {
  now: number;
  /** Waiting + running requests of the function, summed over the cluster. */
  inFlight: number;
  /** Replicas ready to serve now. */
  ready: number;
  /** Most replicas of this function the nodes can fit (their free slots plus what it holds). */
  capacity: number;
}

export interface Decision {
  desired: number;
  state: ScalerState;
  reason: string;
}

export function initialScalerState(): ScalerState {
  return { samples: [], desired: 0, lastScaleUpAt: -Infinity, lastActiveAt: null, panicUntil: -Infinity };
}

function mean(samples: { inFlight: number }[]): number {
  return samples.length ? samples.reduce((a, s) => a + s.inFlight, 0) / samples.length : 0;
}

export function decide(prev: ScalerState, obs: Observation, policy: ScalingPolicy, settings: ScalerSettings = DEFAULT_SCALER_SETTINGS): Decision {
  const { now } = obs;
  const samples = [...prev.samples.filter((s) => s.t > now - settings.stableWindowMs), { t: now, inFlight: obs.inFlight }];
  const lastActiveAt = obs.inFlight > 0 ? now : prev.lastActiveAt;
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
  if (want < prev.desired && now - prev.lastScaleUpAt < settings.stableWindowMs) {
    want = prev.desired;
    reason = 'holding: scale-down waits a stable window after the last scale-up';
  }
  const idle = lastActiveAt === null || now - lastActiveAt >= policy.idleTimeoutS * 1000;
  if (want === 0 && !idle && prev.desired > 0) {
    want = 1;
    reason = `keeping one replica until idle for ${policy.idleTimeoutS} s`;
  }
  if (obs.inFlight > 0 && want === 0) {
    // The queue holds the request while a replica starts (Knative's activator).
    want = 1;
    reason = 'work waiting with no replica: start one';
  }
  let desired = Math.min(Math.max(want, policy.minReplicas), policy.maxReplicas);
  if (desired > obs.capacity) {
    desired = Math.max(obs.capacity, 0);
    reason += `; capped at node capacity ${obs.capacity}`;
  }
  if (desired !== want && desired === policy.maxReplicas) reason += `; capped at maxReplicas ${policy.maxReplicas}`;
  if (desired !== want && desired === policy.minReplicas) reason += `; held at minReplicas ${policy.minReplicas}`;
  return {
    desired,
    reason,
    state: { samples, desired, lastActiveAt, panicUntil, lastScaleUpAt: desired > prev.desired ? now : prev.lastScaleUpAt },
  };
}
