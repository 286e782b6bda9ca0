// Secrets kept in Redis (a tenant's bucket credentials) are sealed with AES-256-GCM under a key
// derived from EMBERS_SECRETS_KEY, which lives only in the platform's configuration: a copy of
// Redis alone reads none of them, and a sealed value altered in Redis fails to open.
import { createCipheriv, createDecipheriv, hkdfSync, randomBytes } from 'node:crypto';

const VERSION = 'v1';

export class Sealer {
  private readonly key: Buffer;

  /** `secret`: EMBERS_SECRETS_KEY; `purpose` keeps keys for different uses apart. */
  constructor(secret: string, purpose: string) {
    this.key = Buffer.from(hkdfSync('sha256', secret, 'embers', `embers:${purpose}`, 32));
  }

  /** `plain` sealed; `context` (e.g. the tenant and bucket) must be given again to open it. */
  seal(plain: string, context: string): string {
    const iv = randomBytes(12);
    const cipher = createCipheriv('aes-256-gcm', this.key, iv);
    cipher.setAAD(Buffer.from(context));
    const body = Buffer.concat([cipher.update(plain, 'utf8'), cipher.final()]);
    return [VERSION, iv.toString('base64url'), body.toString('base64url'), cipher.getAuthTag().toString('base64url')].join('.');
  }

  /** The plain text, or null when `sealed` was not sealed by this key for this context. */
  open(sealed: string, context: string): string | null {
    const [version, iv, body, tag] = sealed.split('.');
    if (version !== VERSION || !iv || body === undefined || !tag) return null;
    try {
      const decipher = createDecipheriv('aes-256-gcm', this.key, Buffer.from(iv, 'base64url'));
      decipher.setAAD(Buffer.from(context));
      decipher.setAuthTag(Buffer.from(tag, 'base64url'));
      return Buffer.concat([decipher.update(Buffer.from(body, 'base64url')), decipher.final()]).toString('utf8');
    } catch {
      return null;
    }
  }
}
