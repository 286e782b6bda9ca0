// Requests a replica answers without running them: one that crashed replicas twice already, one
// whose queue entry lost its body, and one queued for a version that took a different input
// (tensors, or bytes in another field) than the version now running.
import { errorBody, type Manifest, type RunJobData } from '../../core/contracts.ts';
import { plainName } from '../../core/names.ts';
import { MAX_CRASHES } from './batch-lane.ts';

/** The answer to a request that is not run, and what to log about it (an error) when that says something went wrong. */
export interface Refusal {
  status: number;
  body: string;
  log?: { message: string; crashes?: number };
}

/** Why `data` must not run on this version (`crashes`: replicas that died holding it), or undefined to run it. */
export function refusal(manifest: Manifest, data: RunJobData, crashes: number): Refusal | undefined {
  const name = plainName(manifest.name);
  if (crashes >= MAX_CRASHES) {
    // Replicas died twice while holding this request: it is likely the cause. Answer, don't run.
    return {
      status: 500,
      body: JSON.stringify(errorBody('replica_crashed', `${name}: the replica crashed ${crashes} times while running this request; it was not retried again`)),
      log: { message: 'poison request answered without running', crashes },
    };
  }
  if (data.bodyMissing) {
    return {
      status: 500,
      body: JSON.stringify(errorBody('queue_entry_damaged', `${name}: the request's body was missing from its queue entry, so it was not run; send it again`)),
      log: { message: 'binary body missing from the queue entry: answered without running' },
    };
  }
  if (data.tensors && !manifest.tensors) {
    return { status: 400, body: JSON.stringify(errorBody('invalid_input', `${name} version ${manifest.version} does not take tensors (a new version became active meanwhile); call it through /v1/run`)) };
  }
  if (!data.tensors && data.raw !== undefined && data.raw !== manifest.binaryInput) {
    // Bytes queued for a version that took them, run by one that does not (a rollout): its
    // schema would strip the field and run on defaults.
    const takes = manifest.binaryInput ? `bytes as its "${manifest.binaryInput}"` : 'JSON bodies only';
    return { status: 415, body: JSON.stringify(errorBody('unsupported_media_type', `${name} version ${manifest.version} takes ${takes}, and the bytes were sent for "${data.raw}" (a new version became active meanwhile); send the request again`)) };
  }
  return undefined;
}
