// Object storage: bundles, manifests and models. Any S3-compatible server (AWS, MinIO, the
// embedded one under `embers dev`).
import type { GetObjectCommandOutput, HeadObjectCommandOutput, ListObjectsV2CommandOutput, S3Client } from '@aws-sdk/client-s3';
import { createWriteStream } from 'node:fs';
import { mkdir, rename, rm } from 'node:fs/promises';
import path from 'node:path';
import { pipeline } from 'node:stream/promises';
import type { Readable } from 'node:stream';
import { checkS3Uri, type S3Location } from './s3-uri.ts';

export { checkS3Uri, type S3Location };

// Node 20 is supported by the SDK versions we pin; its notice is not actionable for users.
process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true';

type Sdk = typeof import('@aws-sdk/client-s3');
let sdkLoading: Promise<Sdk> | undefined;
/** The SDK, loaded on first use: a quarter of a core-second that a replica whose bundle and models are cached never spends. */
const sdk = (): Promise<Sdk> =>
  (sdkLoading ??= import('@aws-sdk/client-s3').catch((err: unknown) => {
    // Tried again on the next use rather than failing every later one.
    sdkLoading = undefined;
    throw err;
  }));

export function parseS3Uri(uri: string): S3Location {
  const loc = checkS3Uri(uri);
  if ('problem' in loc) throw new TypeError(loc.problem);
  return loc;
}

export interface ObjectStoreOptions {
  endpoint?: string;
  bucket: string;
  /** Used when the standard AWS variables are absent (the embedded server accepts any). */
  fallbackCredentials?: { accessKeyId: string; secretAccessKey: string };
  /** Used always, never the platform's own (a tenant's registered bucket, core/buckets.ts). */
  credentials?: { accessKeyId: string; secretAccessKey: string };
  region?: string;
  /** Limits on reaching a server the platform does not run (ms). */
  timeouts?: { connectMs: number; requestMs: number };
}

export class ObjectStore {
  readonly bucket: string;
  readonly endpoint?: string;
  private clientLoading?: Promise<S3Client>;
  private loadedClient?: S3Client;

  constructor(private readonly options: ObjectStoreOptions) {
    this.bucket = options.bucket;
    this.endpoint = options.endpoint;
  }

  /** The S3 client, made on first use. */
  private client(): Promise<S3Client> {
    return (this.clientLoading ??= sdk().then(({ S3Client }) => {
      const o = this.options;
      const hasEnvCreds = Boolean(process.env.AWS_ACCESS_KEY_ID || process.env.AWS_PROFILE);
      const credentials = o.credentials ?? (!hasEnvCreds ? o.fallbackCredentials : undefined);
      return (this.loadedClient = new S3Client({
        endpoint: o.endpoint,
        forcePathStyle: Boolean(o.endpoint),
        region: o.region ?? process.env.AWS_REGION ?? process.env.AWS_DEFAULT_REGION ?? 'us-east-1',
        ...(credentials ? { credentials } : {}),
        ...(o.timeouts ? { requestHandler: { connectionTimeout: o.timeouts.connectMs, requestTimeout: o.timeouts.requestMs } } : {}),
        // Checksums on every PUT cost a full pass over model files and trip some S3-compatible servers.
        requestChecksumCalculation: 'WHEN_REQUIRED',
        responseChecksumValidation: 'WHEN_REQUIRED',
      }));
    }).catch((err: unknown) => {
      this.clientLoading = undefined;
      throw err;
    }));
  }

  /** Sends the command `make` builds from the SDK. */
  private async send<T = unknown>(make: (s: Sdk) => object, abortSignal?: AbortSignal): Promise<T> {
    const [s, client] = await Promise.all([sdk(), this.client()]);
    return (await client.send(make(s) as Parameters<S3Client['send']>[0], abortSignal ? { abortSignal } : undefined)) as T;
  }

  uri(key: string): string {
    return `s3://${this.bucket}/${key}`;
  }

  private loc(keyOrUri: string): S3Location {
    return keyOrUri.startsWith('s3://') ? parseS3Uri(keyOrUri) : { bucket: this.bucket, key: keyOrUri };
  }

  async ensureBucket(): Promise<void> {
    try {
      await this.send((s) => new s.HeadBucketCommand({ Bucket: this.bucket }));
    } catch (err) {
      if (statusOf(err) !== 404) throw err;
      await this.send((s) => new s.CreateBucketCommand({ Bucket: this.bucket }));
    }
  }

  async ping(abortSignal?: AbortSignal): Promise<void> {
    await this.send((s) => new s.HeadBucketCommand({ Bucket: this.bucket }), abortSignal);
  }

  async put(keyOrUri: string, body: Buffer | string | Readable, contentType = 'application/octet-stream', contentLength?: number): Promise<void> {
    const { bucket, key } = this.loc(keyOrUri);
    // Explicit lengths, empty bodies included (the SDK warns about "streams of unknown length" otherwise).
    const length = contentLength ?? (typeof body === 'string' ? Buffer.byteLength(body) : Buffer.isBuffer(body) ? body.length : undefined);
    await this.send((s) => new s.PutObjectCommand({ Bucket: bucket, Key: key, Body: body, ContentType: contentType, ContentLength: length }));
  }

  async get(keyOrUri: string): Promise<Buffer> {
    const { bucket, key } = this.loc(keyOrUri);
    const res = await this.send<GetObjectCommandOutput>((s) => new s.GetObjectCommand({ Bucket: bucket, Key: key }));
    return Buffer.from(await res.Body!.transformToByteArray());
  }

  /** The object as a stream (batch files can be large). */
  async stream(keyOrUri: string): Promise<Readable> {
    const { bucket, key } = this.loc(keyOrUri);
    const res = await this.send<GetObjectCommandOutput>((s) => new s.GetObjectCommand({ Bucket: bucket, Key: key }));
    return res.Body as Readable;
  }

  /** Streams an object to a file atomically (temp file, then rename). */
  async download(keyOrUri: string, file: string): Promise<void> {
    const { bucket, key } = this.loc(keyOrUri);
    const res = await this.send<GetObjectCommandOutput>((s) => new s.GetObjectCommand({ Bucket: bucket, Key: key }));
    await mkdir(path.dirname(file), { recursive: true });
    const tmp = `${file}.${process.pid}.${Date.now()}.part`;
    try {
      await pipeline(res.Body as Readable, createWriteStream(tmp));
      await rename(tmp, file);
    } catch (err) {
      await rm(tmp, { force: true });
      throw err;
    }
  }

  /** ETag and size, or null when the object does not exist. */
  async head(keyOrUri: string): Promise<{ etag: string; size: number } | null> {
    const { bucket, key } = this.loc(keyOrUri);
    try {
      const res = await this.send<HeadObjectCommandOutput>((s) => new s.HeadObjectCommand({ Bucket: bucket, Key: key }));
      return { etag: (res.ETag ?? '').replaceAll('"', ''), size: res.ContentLength ?? 0 };
    } catch (err) {
      if (statusOf(err) === 404) return null;
      throw err;
    }
  }

  async delete(keyOrUri: string): Promise<void> {
    const { bucket, key } = this.loc(keyOrUri);
    await this.send((s) => new s.DeleteObjectCommand({ Bucket: bucket, Key: key }));
  }

  async list(prefix: string): Promise<string[]> {
    const keys: string[] = [];
    let token: string | undefined;
    do {
      const res = await this.send<ListObjectsV2CommandOutput>((s) => new s.ListObjectsV2Command({ Bucket: this.bucket, Prefix: prefix, ContinuationToken: token }));
      for (const c of res.Contents ?? []) if (c.Key) keys.push(c.Key);
      token = res.IsTruncated ? res.NextContinuationToken : undefined;
    } while (token);
    return keys;
  }

  destroy(): void {
    this.loadedClient?.destroy();
    // A client still being made is destroyed as soon as it exists.
    void this.clientLoading?.then((c) => c.destroy(), () => {});
  }
}

export function statusOf(err: unknown): number | undefined {
  return (err as { $metadata?: { httpStatusCode?: number } })?.$metadata?.httpStatusCode;
}

/**
 * The platform's store from validated config. With an endpoint (the embedded server, MinIO and
 * the like) and no AWS credentials set, placeholder ones (the embedded server accepts any);
 * without one (AWS S3 itself), the SDK's own chain: variables, profiles, instance and pod roles.
 */
export function storeFromConfig(config: { EMBERS_S3_ENDPOINT?: string; EMBERS_S3_BUCKET: string }): ObjectStore {
  return new ObjectStore({
    endpoint: config.EMBERS_S3_ENDPOINT,
    bucket: config.EMBERS_S3_BUCKET,
    ...(config.EMBERS_S3_ENDPOINT ? { fallbackCredentials: { accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER' } } : {}),
  });
}
