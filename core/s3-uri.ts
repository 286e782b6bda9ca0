// s3:// URIs judged by S3's own naming rules before anything is looked up, in a module of their
// own so the contracts (and the CLI) can check them without loading the S3 client.

export interface S3Location {
  bucket: string;
  key: string;
}

/**
 * Why `bucket` breaks S3's bucket naming rules, or null when it keeps them: 3–63 characters of
 * lower-case letters, digits, dots and hyphens, starting and ending with a letter or digit, no
 * two dots in a row, not shaped like an IP address.
 */
/** A caller's text quoted in a message: at most 100 characters (a message never echoes a megabyte back). */
const quote = (text: string) => (text.length > 100 ? `${text.slice(0, 100)}…` : text);

export function bucketNameProblem(bucket: string): string | null {
  if (bucket.length < 3 || bucket.length > 63) return `bucket names are 3 to 63 characters long, and "${quote(bucket)}" has ${bucket.length}`;
  if (!/^[a-z0-9.-]+$/.test(bucket)) return `bucket names hold only lower-case letters, digits, dots and hyphens, and "${quote(bucket)}" does not`;
  if (!/^[a-z0-9].*[a-z0-9]$/.test(bucket)) return `bucket names start and end with a letter or digit, and "${quote(bucket)}" does not`;
  if (bucket.includes('..')) return `bucket names never hold two dots in a row, and "${quote(bucket)}" does`;
  if (/^\d{1,3}(\.\d{1,3}){3}$/.test(bucket)) return `bucket names are never shaped like IP addresses, and "${quote(bucket)}" is`;
  return null;
}

/** The bucket and key of an s3:// URI, or why it is not a valid one (checked before any lookup). */
export function checkS3Uri(uri: string): S3Location | { problem: string } {
  const m = /^s3:\/\/([^/]*)\/(.*)$/s.exec(uri);
  if (!m) return { problem: `"${quote(uri)}" is not an s3://bucket/key URI` };
  const problem = bucketNameProblem(m[1]);
  if (problem) return { problem: `s3://${quote(m[1])}/…: ${problem}` };
  if (m[2] === '') return { problem: `${quote(uri)} names a bucket but no object key` };
  if (Buffer.byteLength(m[2]) > 1024) return { problem: `s3://${m[1]}/…: object keys are at most 1024 bytes` };
  // Servers that keep objects as files (and URL parsers) read these as paths: a/../b would be b.
  if (m[2].split('/').some((s) => s === '' || s === '.' || s === '..')) return { problem: `${quote(uri)}: object keys with empty, "." or ".." path segments are not accepted` };
  return { bucket: m[1], key: m[2] };
}

