// Active manifests and their compiled input validators, cached per gateway and dropped on
// every registry event (with a short TTL as a backstop), so a run costs no registry reads.
import { Ajv2020, type ValidateFunction } from 'ajv/dist/2020.js';
import type { Manifest } from '../core/contracts.ts';
import type { Registry } from '../core/registry.ts';

export interface ActiveFunction {
  manifest: Manifest;
  validate: ValidateFunction;
}

const TTL_MS = 5_000;

export class FunctionsCache {
  private readonly entries = new Map<string, { value: ActiveFunction | null; at: number }>();
  private readonly ajv = new Ajv2020({ allErrors: true, strict: false });

  constructor(private readonly registry: Registry) {}

  async get(name: string): Promise<ActiveFunction | null> {
    const hit = this.entries.get(name);
    if (hit && performance.now() - hit.at < TTL_MS) return hit.value;
    const manifest = await this.registry.active(name);
    const value = manifest ? { manifest, validate: this.ajv.compile(manifest.inputSchema) } : null;
    this.entries.set(name, { value, at: performance.now() });
    return value;
  }

  invalidate(name?: string): void {
    if (name) this.entries.delete(name);
    else this.entries.clear();
  }
}
