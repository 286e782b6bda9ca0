// Whether an automatic rollout goes on: the new version's server error rate and p99 against the
// active version's over the same window, the step's age and the clock in, one verdict out. Pure;
// scheduler/rollouts.ts reads the windows and carries the verdict out.
import { summarize, type SeriesPoint } from '../core/series.ts';

/** What one version did in a window. */
export interface WindowStats {
  requests: number;
  /** Answered 5xx: the version's fault, not its callers'. */
  serverErrors: number;
  p99Ms: number | null;
}

export interface RolloutThresholds {
  /** How long each step lasts at least (EMBERS_ROLLOUT_STEP_S). @default 300 s */
  stepMs: number;
  /** Requests the new version serves in a step before it is judged (EMBERS_ROLLOUT_MIN_REQUESTS); the active version's window counts as a baseline from as many. @default 100 */
  minRequests: number;
  /** How far (a fraction of requests) its server error rate may be above the active version's (EMBERS_ROLLOUT_MAX_ERROR_RATE_INCREASE). @default 0.01 */
  maxErrorRateIncrease: number;
  /** Its p99 may be up to this multiple of the active version's… (EMBERS_ROLLOUT_MAX_P99_RATIO). @default 1.5 */
  maxP99Ratio: number;
  /** …plus this (ms): latency buckets are coarse (core/series.ts), a few ms apart at best. @default 50 */
  p99SlackMs: number;
}

export const DEFAULT_ROLLOUT_THRESHOLDS: RolloutThresholds = { stepMs: 300_000, minRequests: 100, maxErrorRateIncrease: 0.01, maxP99Ratio: 1.5, p99SlackMs: 50 };

export interface RolloutWindow {
  /** The active version's window and the new version's, over the same minutes. */
  old: WindowStats;
  new: WindowStats;
  versions: { old: string; new: string };
  /** Index in `steps` (the new version's shares, the last 100) of the step under way. */
  step: number;
  steps: readonly number[];
  stepStartedAt: number;
  now: number;
}

export type RolloutVerdict =
  | { action: 'wait'; reason: string }
  | { action: 'promote'; step: number; reason: string }
  /** The new version takes every request: it becomes the active one. */
  | { action: 'done'; reason: string }
  | { action: 'roll_back'; reason: string };

/**
 * The verdict on a rollout's step: too few requests on the new version → wait; its error rate or
 * p99 beyond bounds of the old one's → roll back at once, whatever the step's age; within bounds
 * and the step at least `stepMs` old → the next step, or done when the next is the last (100 %).
 */
export function judgeRollout(w: RolloutWindow, t: RolloutThresholds): RolloutVerdict {
  const { old, versions } = w;
  const fresh = w.new;
  if (fresh.requests < t.minRequests) return { action: 'wait', reason: `${versions.new} has served ${fresh.requests} of the ${t.minRequests} requests it is judged on` };
  const baseline = old.requests >= t.minRequests;
  const oldRate = baseline ? old.serverErrors / old.requests : 0;
  const newRate = fresh.serverErrors / fresh.requests;
  if (newRate > oldRate + t.maxErrorRateIncrease) {
    return { action: 'roll_back', reason: `${versions.new} answered ${pct(newRate)} of ${fresh.requests} requests with a server error, against ${baseline ? `${pct(oldRate)} for ${versions.old}` : '0 % allowed without a baseline'} (at most ${pct(t.maxErrorRateIncrease)} more)` };
  }
  if (baseline && old.p99Ms !== null && fresh.p99Ms !== null) {
    const bound = old.p99Ms * t.maxP99Ratio + t.p99SlackMs;
    if (fresh.p99Ms > bound) return { action: 'roll_back', reason: `${versions.new}'s p99 was ${ms(fresh.p99Ms)}, against ${ms(old.p99Ms)} for ${versions.old} (at most ${ms(bound)})` };
  }
  if (w.now - w.stepStartedAt < t.stepMs) return { action: 'wait', reason: `${versions.new} is within bounds; its step lasts ${Math.round(t.stepMs / 1000)} s` };
  const healthy = `${versions.new} stayed within bounds of ${versions.old} over ${fresh.requests} requests (${pct(newRate)} server errors, p99 ${fresh.p99Ms === null ? '-' : ms(fresh.p99Ms)})`;
  const next = w.step + 1;
  if (next >= w.steps.length - 1) return { action: 'done', reason: healthy };
  return { action: 'promote', step: next, reason: healthy };
}

/**
 * Before its first step a rollout's version takes no requests while its first replica starts, so
 * that its window is not judged on its own cold start: go (to step 0) once one is ready, roll back
 * when its replica failed to start since the rollout began, else wait.
 */
export function judgeWarmup(w: { version: string; ready: number; startFailure?: { phase: string; message: string } }): RolloutVerdict {
  if (w.ready > 0) return { action: 'promote', step: 0, reason: `${w.version} has a replica ready` };
  if (w.startFailure) return { action: 'roll_back', reason: `${w.version} could not start: ${w.startFailure.phase} failed: ${w.startFailure.message}` };
  return { action: 'wait', reason: `${w.version} is starting its first replica` };
}

/** A version's window from its per-minute points. */
export function windowOf(points: SeriesPoint[]): WindowStats {
  const s = summarize(points);
  return { requests: s.requests, serverErrors: points.reduce((a, p) => a + p.serverErrors, 0), p99Ms: s.p99Ms };
}

const pct = (x: number) => `${(Math.round(x * 1000) / 10).toString()} %`;
const ms = (x: number) => `${Math.round(x)} ms`;
