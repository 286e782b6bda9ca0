// Node-level disk cache of models, keyed by content (the object's ETag and size), shared by
// every replica on the node and bounded in size with LRU eviction. Downloads land atomically,
// so concurrent replicas never see a partial file. A model is read once, when its session is
// created, so evicting a file a running replica loaded earlier is safe.
import { readdir, rm, stat, utimes } from 'node:fs/promises';
import path from 'node:path';
import { sourceTag } from '../../core/buckets.ts';
import type { ObjectStore } from '../../core/s3.ts';

export interface CachedModel {
  path: string;
  bytes: number;
  /** True when the file was already on disk (no download). */
  hit: boolean;
}

const CONTENT_ADDRESSED = /\/models\/sha256\/([0-9a-f]{64})\.onnx$/;

export class ModelCache {
  constructor(
    private readonly dir: string,
    private readonly store: ObjectStore,
    private readonly maxBytes = Number.POSITIVE_INFINITY,
  ) {}

  /** `from`: the store that reads `uri` (the platform's by default; `tenant`'s registered bucket). */
  async fetch(uri: string, from: ObjectStore = this.store, tenant = ''): Promise<CachedModel> {
    const platform = from === this.store;
    // Models uploaded through Embers are named by their sha256: a file of that name is that
    // model, so a cache hit costs no S3 round trip.
    const sha = platform ? CONTENT_ADDRESSED.exec(uri)?.[1] : undefined;
    if (sha) {
      const file = path.join(this.dir, `sha256-${sha}.onnx`);
      const existing = await stat(file).catch(() => null);
      if (existing) return this.touch(file, existing.size);
      await this.store.download(uri, file);
      await this.evict(file);
      return { path: file, bytes: (await stat(file)).size, hit: false };
    }
    const head = await from.head(uri);
    if (!head) throw new Error(`model ${uri} not found in S3`);
    // Outside the platform's bucket, the ETag is whatever the tenant's server says: the name holds
    // the object's origin too, so no tenant is served a file another tenant's model left here.
    const origin = platform ? '' : `${sourceTag(tenant, from, uri)}-`;
    const file = path.join(this.dir, `${origin}${head.etag.replace(/[^A-Za-z0-9_-]/g, '_')}-${head.size}.onnx`);
    const existing = await stat(file).catch(() => null);
    if (existing && existing.size === head.size) return this.touch(file, head.size);
    await from.download(uri, file);
    await this.evict(file);
    return { path: file, bytes: head.size, hit: false };
  }

  /** Marks a hit as recently used (LRU order is file mtime). */
  private async touch(file: string, bytes: number): Promise<CachedModel> {
    const now = new Date();
    await utimes(file, now, now).catch(() => {});
    return { path: file, bytes, hit: true };
  }

  /** Removes least recently used models until the cache fits its bound; never `keep`. */
  async evict(keep?: string): Promise<string[]> {
    const entries = await Promise.all(
      (await readdir(this.dir).catch(() => [] as string[]))
        .filter((f) => f.endsWith('.onnx'))
        .map(async (f) => {
          const full = path.join(this.dir, f);
          const s = await stat(full).catch(() => null);
          return s ? { full, size: s.size, used: s.mtimeMs } : null;
        }),
    );
    const files = entries.filter((e): e is { full: string; size: number; used: number } => e !== null).sort((a, b) => a.used - b.used);
    let total = files.reduce((a, f) => a + f.size, 0);
    const removed: string[] = [];
    for (const f of files) {
      if (total <= this.maxBytes) break;
      if (f.full === keep) continue;
      await rm(f.full, { force: true });
      total -= f.size;
      removed.push(f.full);
    }
    return removed;
  }
}
