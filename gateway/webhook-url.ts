// A webhook URL a caller gives (an async run's, a budget's): checked when it arrives, so a
// delivery that could never succeed is refused up front (decisions/022).
import { refusedHost } from '../core/webhook-target.ts';
import { ApiError } from './errors.ts';

/** A webhook must be an absolute http(s) URL, on a public address unless private ones are allowed (its host is resolved again at each delivery). */
export function webhookOf(raw: string | undefined, allowPrivate: boolean): string | undefined {
  if (raw === undefined || raw === '') return undefined;
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new ApiError(400, 'invalid_webhook', `webhook "${raw}" is not an absolute URL; give one like https://example.com/hooks/embers`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new ApiError(400, 'invalid_webhook', `webhook must be an http or https URL, not ${url.protocol}`);
  // fetch refuses such a URL, so every delivery would fail after the run was accepted.
  if (url.username !== '' || url.password !== '') throw new ApiError(400, 'invalid_webhook', 'webhook URLs cannot carry a user or password (user:password@host); check the Embers-Signature header instead (GET /v1/webhooks/secret)');
  const refused = allowPrivate ? null : refusedHost(url);
  if (refused) throw new ApiError(400, 'invalid_webhook', `webhook not allowed: ${refused}; webhooks go to public addresses (EMBERS_WEBHOOK_ALLOW_PRIVATE=1 allows private ones)`);
  return url.href;
}
