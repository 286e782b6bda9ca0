// The document as each tenant is shown it, serialized, cached per tenant: dropped whenever a
// function is deployed or deleted (FunctionsCache.onChange, fed by the registry channel), with a
// TTL as a backstop, like the functions cache's.
import { withFunctions, type DeployedFunction } from './function-paths.ts';
import type { OpenApiDocument } from './document.ts';

const TTL_MS = 60_000;
/** Tenants kept at once; past it the cache starts over (a document is rebuilt in a few ms). */
const MAX_ENTRIES = 1_000;

export class OpenApiDocuments {
  private base?: OpenApiDocument;
  private baseJson?: string;
  private readonly entries = new Map<string, { json: string; at: number }>();
  /** Bumped by each change: a document built across one is not kept. */
  private generation = 0;

  constructor(
    private readonly build: () => OpenApiDocument,
    private readonly functionsOf: (tenant: string) => Promise<DeployedFunction[]>,
  ) {}

  /** The routes alone, for a caller without a key. Built on first use: route modules are all loaded by then. */
  staticJson(): string {
    return (this.baseJson ??= JSON.stringify(this.staticDocument()));
  }

  /** The routes and `tenant`'s functions. */
  async forTenant(tenant: string): Promise<string> {
    const hit = this.entries.get(tenant);
    if (hit && performance.now() - hit.at < TTL_MS) return hit.json;
    const generation = this.generation;
    const json = JSON.stringify(withFunctions(this.staticDocument(), await this.functionsOf(tenant)));
    if (generation === this.generation) {
      if (this.entries.size >= MAX_ENTRIES) this.entries.clear();
      this.entries.set(tenant, { json, at: performance.now() });
    }
    return json;
  }

  /** A function was deployed or deleted: which tenant's is not worth working out. */
  changed(): void {
    this.generation++;
    this.entries.clear();
  }

  private staticDocument(): OpenApiDocument {
    return (this.base ??= this.build());
  }
}
