// Active manifests, their traffic splits and compiled input validators, cached per gateway and
// dropped on every registry event (with a short TTL as a backstop), so a run costs no registry reads.
import type { Manifest } from '../core/contracts.ts';
import type { Registry } from '../core/registry.ts';
import { findOwned, pinnedVersion, plainName, versionKey } from '../core/names.ts';
import { toSplit, trafficBucket, type TrafficSplit } from '../core/traffic.ts';
import { compileInputSchema, type InputValidator } from '../core/validate.ts';
import { ApiError } from './errors.ts';

export interface ActiveFunction {
  manifest: Manifest;
  validate: InputValidator;
  /** The tenant that owns the function. */
  tenant: string;
  /** The version that takes a share of its requests on its own key (core/traffic.ts); null: none. */
  split: TrafficSplit | null;
}

/** The header whose value keeps a caller on one version of a split function (hashed to its bucket). */
export const VERSION_KEY_HEADER = 'embers-version-key';

const TTL_MS = 5_000;
const FAILURE_FRESH_MS = 5_000;

export class FunctionsCache {
  private readonly entries = new Map<string, { value: ActiveFunction | null; at: number }>();

  constructor(private readonly registry: Registry) {}

  /** `tenant`'s function `name` and its key: another tenant's is as missing as one that does not exist. */
  find(tenant: string, name: string): Promise<{ key: string; fn: ActiveFunction } | null> {
    return findOwned(tenant, name, (key) => this.get(key));
  }

  /** The function under a key (core/names.ts), whoever owns it. */
  async get(name: string): Promise<ActiveFunction | null> {
    const hit = this.entries.get(name);
    if (hit && performance.now() - hit.at < TTL_MS) return hit.value;
    const [manifest, tenant, routing] = await Promise.all([this.registry.active(name), this.registry.owner(name), pinnedVersion(name) ? null : this.registry.routing(name)]);
    const value = manifest && tenant ? { manifest, validate: this.validator(manifest), tenant, split: routing?.split ?? null } : null;
    this.entries.set(name, { value, at: performance.now() });
    return value;
  }

  /**
   * The version that serves this request of `found`: the active one on the function's key, or, for
   * the split's share of buckets (trafficBucket: by `callerKey` when sent), the split's version on
   * its own key.
   */
  serving(found: { key: string; fn: ActiveFunction }, callerKey: string | undefined): { key: string; fn: ActiveFunction } | Promise<{ key: string; fn: ActiveFunction }> {
    const split = found.fn.split;
    // Most functions have no split: no promise on every run's path.
    if (!split || !toSplit(split, trafficBucket(found.key, callerKey))) return found;
    return this.pinned(found, split.version).then((pinned) => pinned ?? found);
  }

  /** `found`'s `version` on its version key, or null when it has no such version. */
  async pinned(found: { key: string }, version: string): Promise<{ key: string; fn: ActiveFunction } | null> {
    const key = versionKey(found.key, version);
    const fn = await this.get(key);
    return fn ? { key, fn } : null;
  }

  private readonly validators = new Map<string, { version: string; validate: InputValidator }>();

  /** Compiled once per version, not on every refresh of the entry. */
  private validator(m: Manifest): InputValidator {
    const known = this.validators.get(m.name);
    if (known?.version === m.version) return known.validate;
    let validate: InputValidator;
    try {
      validate = compileInputSchema(m.inputSchema);
    } catch (err) {
      // Deploys check their schema since this was possible; an older one may still be active.
      throw new ApiError(500, 'invalid_schema', `${plainName(m.name)} version ${m.version} has an input schema that cannot be compiled (${(err as Error).message}); deploy it again`);
    }
    this.validators.set(m.name, { version: m.version, validate });
    return validate;
  }

  private readonly failing = new Map<string, { phase: string; message: string; at: number }>();

  /** Replica start failures, cleared when a replica of the function becomes ready. */
  replicaEvent(name: string, state: 'ready' | 'failed', error?: { phase: string; message: string }): void {
    if (state === 'ready') this.failing.delete(name);
    else if (error) this.failing.set(name, { ...error, at: performance.now() });
  }

  /**
   * Why the function's last replica could not start, if that was within `withinMs` and none has
   * started since, and in how many seconds requests go through again (their work triggers a new
   * try). Failures of a run are not announced as start failures: they refuse no one.
   */
  startFailure(name: string, withinMs = FAILURE_FRESH_MS): { phase: string; message: string; retryInS: number } | undefined {
    const f = this.failing.get(name);
    const age = f ? performance.now() - f.at : Infinity;
    return f && age < withinMs ? { phase: f.phase, message: f.message, retryInS: Math.max(1, Math.ceil((withinMs - age) / 1000)) } : undefined;
  }

  invalidate(name?: string): void {
    if (name) for (const key of this.entries.keys()) if (key === name || key.startsWith(`${name}@`)) this.entries.delete(key);
    if (!name) this.entries.clear();
    this.changed();
  }

  /** A deleted function's validator goes with it. */
  forget(name: string): void {
    for (const key of this.entries.keys()) if (key === name || key.startsWith(`${name}@`)) this.entries.delete(key);
    this.validators.delete(name);
    this.changed();
  }

  private readonly listeners: (() => void)[] = [];

  /** Calls `listener` whenever a function is deployed or deleted (what is derived from the registry, such as the OpenAPI documents, is dropped with it). */
  onChange(listener: () => void): void {
    this.listeners.push(listener);
  }

  private changed(): void {
    for (const listener of this.listeners) listener();
  }
}
