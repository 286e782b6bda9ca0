// Automatic rollouts, carried out by the leading scheduler on each pass (one place decides): for
// each function in keys.rollouts, the two versions' per-minute series over the minutes since the
// step began (core/series.ts), the verdict (rollout-judge.ts), and the registry changed to match,
// only while the split is still the one judged (a rollback or deploy meanwhile wins).
import type { Redis } from 'ioredis';
import { keys } from '../core/keys.ts';
import type { Logger } from '../core/log.ts';
import { plainName, versionKey } from '../core/names.ts';
import type { Registry } from '../core/registry.ts';
import { readSeries } from '../core/series.ts';
import { ROLLOUT_STEPS, type RolloutOutcome } from '../core/traffic.ts';
import { judgeRollout, judgeWarmup, windowOf, type RolloutThresholds, type RolloutWindow } from './rollout-judge.ts';

export class RolloutDriver {
  constructor(private readonly o: { redis: Redis; registry: Registry; thresholds: RolloutThresholds; log: Logger }) {}

  /** Judges every automatic rollout once; one that fails to be read is tried again next pass. */
  async pass(now = Date.now()): Promise<void> {
    for (const fn of await this.o.redis.smembers(keys.rollouts)) {
      await this.step(fn, now).catch((err) => this.o.log.warn({ fn, err: (err as Error).message }, 'could not judge a rollout'));
    }
  }

  private async step(fn: string, now: number): Promise<void> {
    const routing = await this.o.registry.routing(fn);
    const split = routing?.split;
    if (!routing || !split?.auto) {
      await this.o.redis.srem(keys.rollouts, fn);
      return;
    }
    const { step, stepStartedAt } = split.auto;
    const candidate = versionKey(fn, split.version);
    const verdict = split.percent === 0 ? judgeWarmup({ version: split.version, ...(await this.startOf(candidate, stepStartedAt)) }) : judgeRollout(await this.window(fn, candidate, routing.active, split.version, step, stepStartedAt, now), this.o.thresholds);
    if (verdict.action === 'wait') return;
    const outcome = (o: RolloutOutcome['outcome']): RolloutOutcome => ({ version: split.version, from: routing.active, outcome: o, reason: verdict.reason, at: new Date(now).toISOString() });
    const to =
      verdict.action === 'promote'
        ? { split: { ...split, percent: ROLLOUT_STEPS[verdict.step], auto: { step: verdict.step, stepStartedAt: now } } }
        : verdict.action === 'done'
          ? { active: split.version, split: null, rollout: outcome('promoted') }
          : { split: null, rollout: outcome('rolled_back') };
    const routed = await this.o.registry.route(fn, to, split);
    if (routed !== 'routed') return;
    const log = { fn: plainName(fn), version: split.version, reason: verdict.reason };
    if (verdict.action === 'roll_back') this.o.log.warn(log, 'rollout rolled back');
    else this.o.log.info({ ...log, percent: verdict.action === 'promote' ? ROLLOUT_STEPS[verdict.step] : 100 }, 'rollout promoted');
  }

  /** Both versions over the same minutes: whole minutes are what the series keeps, so every minute the step has touched. */
  private async window(fn: string, candidate: string, old: string, version: string, step: number, stepStartedAt: number, now: number): Promise<RolloutWindow> {
    const minutes = Math.floor(now / 60_000) - Math.floor(stepStartedAt / 60_000) + 1;
    const series = await readSeries(this.o.redis, [fn, candidate], minutes, now);
    return { old: windowOf(series.get(fn)!), new: windowOf(series.get(candidate)!), versions: { old, new: version }, step, steps: ROLLOUT_STEPS, stepStartedAt, now };
  }

  /** The version key's ready replicas, and its latest cold start's failure if that came after `since` (ms). */
  private async startOf(candidate: string, since: number): Promise<{ ready: number; startFailure?: { phase: string; message: string } }> {
    const ids = await this.o.redis.smembers(keys.replicas(candidate));
    const records = ids.length ? await this.o.redis.mget(ids.map(keys.replica)) : [];
    const ready = records.filter((r) => r !== null && (JSON.parse(r) as { state: string }).state === 'ready').length;
    const last = await this.o.redis.lindex(keys.coldStarts(candidate), 0);
    const start = last ? (JSON.parse(last) as { at?: string; error?: { phase: string; message: string } }) : null;
    return start?.error && Date.parse(start.at ?? '') >= since ? { ready, startFailure: start.error } : { ready };
  }
}
