// Node-level disk cache of models, keyed by content (the object's ETag and size), shared by
// every replica on the node. Downloads land atomically, so concurrent replicas never see a
// partial file.
import { stat } from 'node:fs/promises';
import path from 'node:path';
import type { ObjectStore } from '../core/s3.ts';

export interface CachedModel {
  path: string;
  bytes: number;
  /** True when the file was already on disk (no download). */
  hit: boolean;
}

export class ModelCache {
  constructor(
    private readonly dir: string,
    private readonly store: ObjectStore,
  ) {}

  async fetch(uri: string): Promise<CachedModel> {
    const head = await this.store.head(uri);
    if (!head) throw new Error(`model ${uri} not found in S3`);
    const file = path.join(this.dir, `${head.etag.replace(/[^A-Za-z0-9_-]/g, '_')}-${head.size}.onnx`);
    const existing = await stat(file).catch(() => null);
    if (existing && existing.size === head.size) return { path: file, bytes: head.size, hit: true };
    await this.store.download(uri, file);
    return { path: file, bytes: head.size, hit: false };
  }
}
