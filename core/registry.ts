// The function registry: immutable versions (bundle + manifest in S3, manifest copy in Redis)
// and which versions take traffic (core/traffic.ts). Every change is announced on one channel.
import { createHash } from 'node:crypto';
import type { Redis } from 'ioredis';
import type { ObjectStore } from './s3.ts';
import { s3Keys, type DeploySpec, type Manifest, type PlatformEvent } from './contracts.ts';
import { baseKey, DEFAULT_TENANT, findOwned, pinnedVersion, versionKey } from './names.ts';
import type { RolloutOutcome, Routing, TrafficSplit } from './traffic.ts';
import { evalScript } from './redis.ts';
import { lua } from './lua.ts';
import { keys } from './keys.ts';

export interface FunctionSummary {
  /** Its key (core/names.ts): the gateway shows a tenant the plain name. */
  name: string;
  active: string;
  versions: number;
  updatedAt: string;
  /** The tenant that owns it: the one that first deployed it. */
  tenant: string;
}

const CLAIM = lua('registry-claim');

export type RegistryEvent = Extract<PlatformEvent, { type: 'deployed' | 'deleted' }>;

export class Registry {
  constructor(
    private readonly redis: Redis,
    private readonly store: ObjectStore,
  ) {}

  /**
   * Stores a new immutable version and makes it active (ending any split of its traffic). Deploying
   * exactly what is already active (same bundle, same spec) returns the active version instead of
   * minting a new one. With `activate: false` the version is only stored (a function's first
   * version is made active all the same), and one already stored is returned as it is.
   */
  async deploy(spec: DeploySpec, bundle: Buffer, o: { activate?: boolean } = {}): Promise<Manifest & { unchanged?: boolean; activated: boolean }> {
    const sha256 = createHash('sha256').update(bundle).digest('hex');
    const current = await this.active(spec.name);
    const same = (m: Manifest) => m.bundle.sha256 === sha256 && sameSpec(m, spec);
    if (current && same(current)) {
      // Back in the index if a delete was cut short after taking it out (remove).
      if (await this.redis.sadd(keys.functionIndex, spec.name)) {
        await this.redis.sadd(keys.active, spec.name);
        await this.publish({ type: 'deployed', name: spec.name, version: current.version });
      }
      return { ...current, unchanged: true, activated: true };
    }
    const activated = o.activate !== false || !current;
    if (!activated) {
      const stored = (await this.versions(spec.name)).find(same);
      if (stored) return { ...stored, unchanged: true, activated: false };
    }
    const seq = await this.redis.incr(keys.versionSeq(spec.name));
    const version = `v${seq}`;
    const manifest: Manifest = {
      ...spec,
      version,
      createdAt: new Date().toISOString(),
      bundle: { key: s3Keys.bundle(spec.name, version), sha256, bytes: bundle.length },
    };
    await this.store.put(manifest.bundle.key, bundle, 'text/javascript');
    await this.store.put(s3Keys.manifest(spec.name, version), JSON.stringify(manifest, null, 2), 'application/json');
    const write = this.redis.multi().hset(keys.versions(spec.name), version, JSON.stringify(manifest));
    if (activated) {
      write
        .hset(keys.function(spec.name), { active: version, updatedAt: manifest.createdAt, ...(current ? { previous: current.version } : {}) })
        .hdel(keys.function(spec.name), 'split')
        .srem(keys.rollouts, spec.name);
    }
    await write
      .sadd(keys.functionIndex, spec.name)
      // The scheduler looks at it (minReplicas, a new version for its replicas), then lets it be.
      .sadd(keys.active, spec.name)
      .exec();
    await this.publish({ type: 'deployed', name: spec.name, version });
    return { ...manifest, activated };
  }

  /** Which versions take the function's traffic, or null when there is no such function. */
  async routing(name: string): Promise<Routing | null> {
    const [active, previous, split, rollout] = await this.redis.hmget(keys.function(name), 'active', 'previous', 'split', 'rollout');
    if (!active) return null;
    return { active, previous, split: split ? (JSON.parse(split) as TrafficSplit) : null, rollout: rollout ? (JSON.parse(rollout) as RolloutOutcome) : null };
  }

  /**
   * Sets the function's active version (the one before becomes `previous`), its split (null: none)
   * and, when given, how its rollout ended; every gateway hears it at once. With `unlessChangedFrom`
   * (the split as it was read, null: none), only while its split is still that one.
   */
  async route(name: string, to: { active?: string; split: TrafficSplit | null; rollout?: RolloutOutcome }, unlessChangedFrom?: TrafficSplit | null): Promise<'routed' | 'not_found' | 'changed'> {
    const expected = unlessChangedFrom === undefined ? '*' : unlessChangedFrom === null ? '' : JSON.stringify(unlessChangedFrom);
    const args = [expected, to.active ?? '', to.split ? JSON.stringify(to.split) : '', to.rollout ? JSON.stringify(to.rollout) : '', new Date().toISOString(), name];
    const res = (await evalScript(this.redis, ROUTE, 2, keys.function(name), keys.rollouts, ...args)) as number;
    if (res === 0) return 'not_found';
    if (res < 0) return 'changed';
    // The scheduler looks at it, and at the split's version key, which keeps a replica warm (pinned).
    await this.redis.sadd(keys.active, name, ...(to.split ? [versionKey(name, to.split.version)] : []));
    await this.publish({ type: 'deployed', name, version: to.active });
    return 'routed';
  }

  /**
   * Makes a new version of the active one, the same bundle and spec, active in its place, so
   * that replicas roll onto it as on a deploy (the agent drains the old ones, which finish what
   * they hold): what a change of the function's secrets needs, since a replica reads them when
   * it starts. A deploy in between wins (tried again on the version it made); null when the
   * function is gone.
   */
  async roll(name: string, reason: NonNullable<Manifest['rolledFor']>): Promise<Manifest | null> {
    for (let attempt = 0; attempt < ROLL_ATTEMPTS; attempt++) {
      const current = await this.active(name);
      if (!current) return null;
      const version = `v${await this.redis.incr(keys.versionSeq(name))}`;
      const manifest: Manifest = { ...current, version, createdAt: new Date().toISOString(), rolledFor: reason };
      await this.store.put(s3Keys.manifest(name, version), JSON.stringify(manifest, null, 2), 'application/json');
      const ks = [keys.function(name), keys.versions(name), keys.footprints(name), keys.active];
      if (await evalScript(this.redis, ROLL, ks.length, ...ks, current.version, version, JSON.stringify(manifest), manifest.createdAt, name)) {
        await this.publish({ type: 'deployed', name, version });
        return manifest;
      }
    }
    throw new Error(`${name} kept changing while its replicas were to be rolled; try again`);
  }

  /** Makes `tenant` the owner of `name` unless someone owns it already; returns the owner. */
  async claim(name: string, tenant: string): Promise<string> {
    return (await evalScript(this.redis, CLAIM, 1, keys.function(name), tenant, DEFAULT_TENANT)) as string;
  }

  /** The key of `tenant`'s function `name` (findOwned), or null when that tenant has none. */
  async find(tenant: string, name: string): Promise<string | null> {
    const found = await findOwned(tenant, name, async (key) => {
      const owner = await this.owner(key);
      return owner === null ? null : { tenant: owner };
    });
    return found?.key ?? null;
  }

  /** The tenant that owns a deployed function, or null when there is no such function. */
  async owner(name: string): Promise<string | null> {
    const [active, tenant] = await this.redis.hmget(keys.function(baseKey(name)), 'active', 'tenant');
    return active ? (tenant ?? DEFAULT_TENANT) : null;
  }

  /** The manifest a key serves: a function's active version, or a version key's version (core/names.ts). */
  async active(name: string): Promise<Manifest | null> {
    const pinned = pinnedVersion(name);
    if (pinned) return this.pinned(name, pinned);
    const version = await this.redis.hget(keys.function(name), 'active');
    if (!version) return null;
    const raw = await this.redis.hget(keys.versions(name), version);
    return raw ? (JSON.parse(raw) as Manifest) : null;
  }

  /**
   * A version key's manifest, under that key, while its function is deployed. Out of the split it
   * serves only what was queued to it before, so its replicas go as soon as that is done.
   */
  private async pinned(key: string, version: string): Promise<Manifest | null> {
    const fn = baseKey(key);
    const [[active, split], raw] = await Promise.all([this.redis.hmget(keys.function(fn), 'active', 'split'), this.redis.hget(keys.versions(fn), version)]);
    if (!active || !raw) return null;
    const m = JSON.parse(raw) as Manifest;
    const serving = split !== null && (JSON.parse(split) as TrafficSplit).version === version;
    // In the split it keeps a replica warm, as it may take no request for a while at a small share.
    const scaling = serving ? { ...m.scaling, minReplicas: Math.max(1, m.scaling.minReplicas) } : { ...m.scaling, minReplicas: 0, idleTimeoutS: 1 };
    return { ...m, name: key, scaling };
  }

  async versions(name: string): Promise<Manifest[]> {
    const all = await this.redis.hvals(keys.versions(name));
    return all.map((r) => JSON.parse(r) as Manifest).sort((a, b) => versionNumber(a.version) - versionNumber(b.version));
  }

  async list(): Promise<FunctionSummary[]> {
    const names = (await this.redis.smembers(keys.functionIndex)).sort();
    const pipe = this.redis.pipeline();
    for (const n of names) {
      pipe.hgetall(keys.function(n));
      pipe.hlen(keys.versions(n));
    }
    const res = (await pipe.exec()) ?? [];
    return names.map((name, i) => {
      const meta = res[i * 2][1] as Record<string, string>;
      return { name, active: meta.active ?? '', versions: res[i * 2 + 1][1] as number, updatedAt: meta.updatedAt ?? '', tenant: meta.tenant ?? DEFAULT_TENANT };
    });
  }

  async activeManifests(): Promise<Manifest[]> {
    const names = await this.redis.smembers(keys.functionIndex);
    const found = await Promise.all(names.map((n) => this.active(n)));
    return found.filter((m): m is Manifest => m !== null);
  }

  /**
   * Removes a function from the registry; its versions stay in S3 (immutable history). With
   * `unlessQueuedIn` (its live stream), only while that stream holds nothing, in the same call,
   * so no request queued meanwhile is left behind. 'removed', 'not_found', or the entries queued.
   * In two steps: first out of the index (from then on no gateway can queue a run for it:
   * LiveQueue.add's mustBeDeployed), then `beforeDelete` (answering what is still queued), then
   * its records. If `beforeDelete` throws, the function stays half removed, out of the index with
   * its records, and removing it again finishes the work.
   */
  async remove(name: string, o: { unlessQueuedIn?: string; beforeDelete?: () => Promise<void> } = {}): Promise<'removed' | 'not_found' | 'redeployed' | { queued: number }> {
    const ks = [keys.functionIndex, keys.function(name), ...(o.unlessQueuedIn ? [o.unlessQueuedIn] : [])];
    const res = (await evalScript(this.redis, UNINDEX, ks.length, ...ks, name)) as number;
    if (res < 0) return { queued: -res };
    if (res === 0) return 'not_found';
    await o.beforeDelete?.();
    // A deploy in between put it back in the index with records of its own: those stay.
    if (!(await evalScript(this.redis, DELETE_UNINDEXED, 5, keys.functionIndex, keys.function(name), keys.versions(name), keys.footprints(name), keys.secrets(name), name))) return 'redeployed';
    await this.publish({ type: 'deleted', name });
    return 'removed';
  }

  private async publish(event: RegistryEvent): Promise<void> {
    await this.redis.publish(keys.registryChannel, JSON.stringify(event));
  }
}

const UNINDEX = lua('registry-unindex');

const ROLL = lua('registry-roll');
/** Deploys racing a roll each make it try again on their version; past this many, it gives up. */
const ROLL_ATTEMPTS = 5;
const ROUTE = lua('registry-route');

const DELETE_UNINDEXED = lua('registry-delete-unindexed');

function sameSpec(m: Manifest, spec: DeploySpec): boolean {
  const pick = (x: DeploySpec) => JSON.stringify([x.models, x.inputSchema, x.batching, x.scaling, x.timeoutMs, x.pricing, x.maxQueueLength, x.binaryInput, x.vars ?? {}]);
  return pick(m) === pick(spec);
}

function versionNumber(v: string): number {
  return Number(v.slice(1)) || 0;
}
