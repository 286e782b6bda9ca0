// Files API uploads (anchor: OpenAI's Files API): a tenant's batch inputs, kept in S3 under its
// own prefix (s3Keys.file) with a record in Redis, until it deletes them.
import { randomBytes } from 'node:crypto';
import type { Redis } from 'ioredis';
import { keys } from './keys.ts';

/** File ids: checked by shape before any lookup, so a malformed one is as unknown as a missing one. */
export const FILE_ID = /^file_[A-Za-z0-9_-]{16}$/;

export const FILE_PURPOSES = ['batch'] as const;
export type FilePurpose = (typeof FILE_PURPOSES)[number];

export interface FileRecord {
  id: string;
  tenant: string;
  /** Where the bytes are: an s3:// URI in the platform bucket. */
  uri: string;
  bytes: number;
  filename: string;
  purpose: FilePurpose;
  createdAt: string;
}

/** What the API shows of a file. */
export interface FileView {
  id: string;
  object: 'file';
  bytes: number;
  filename: string;
  purpose: FilePurpose;
  createdAt: string;
}

export function fileView(f: FileRecord): FileView {
  return { id: f.id, object: 'file', bytes: f.bytes, filename: f.filename, purpose: f.purpose, createdAt: f.createdAt };
}

export class FileStore {
  constructor(private readonly redis: Redis) {}

  static newId(): string {
    return `file_${randomBytes(12).toString('base64url')}`;
  }

  async create(f: FileRecord): Promise<void> {
    await this.redis
      .multi()
      .hset(keys.file(f.id), { ...f, bytes: String(f.bytes) })
      .zadd(keys.files(f.tenant), Date.parse(f.createdAt), f.id)
      .exec();
  }

  /** The record, or null for an unknown or malformed id. */
  async get(id: string): Promise<FileRecord | null> {
    if (!FILE_ID.test(id)) return null;
    const h = await this.redis.hgetall(keys.file(id));
    if (!h.id) return null;
    return { ...(h as unknown as FileRecord), bytes: Number(h.bytes) };
  }

  /** A tenant's files, newest first. */
  async list(tenant: string, limit: number): Promise<FileRecord[]> {
    const ids = await this.redis.zrevrange(keys.files(tenant), 0, limit - 1);
    return (await Promise.all(ids.map((id) => this.get(id)))).filter((f) => f !== null);
  }

  /** Forgets the record; true when there was one. */
  async delete(f: Pick<FileRecord, 'id' | 'tenant'>): Promise<boolean> {
    const [[, removed] = []] = (await this.redis.multi().del(keys.file(f.id)).zrem(keys.files(f.tenant), f.id).exec()) ?? [];
    return removed === 1;
  }
}
