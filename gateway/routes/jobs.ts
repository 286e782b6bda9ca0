// /v1/jobs/:id — async runs: read the status and result, follow their chunks as events, or cancel.
import { Hono, type Context } from 'hono';
import { canAccess } from '../../core/tenants.ts';
import { recordUsage } from '../../core/usage.ts';
import { requireScope } from '../middleware/auth.ts';
import { CANCELED_BODY, enqueueWebhook, JOB_ID } from '../../core/jobs.ts';
import { ApiError } from '../errors.ts';
import type { GatewayDeps, GatewayEnv } from '../deps.ts';
import { keys } from '../../core/keys.ts';
import { resumeAfter } from '../../core/chunks.ts';
import { jobEvents } from '../job-events.ts';

export function jobRoutes(deps: GatewayDeps) {
  const app = new Hono<GatewayEnv>();

  const find = async (c: Context<GatewayEnv>, id: string) => {
    requireScope(c, 'run');
    // A malformed id (`<id>:gone` names the tombstone's key) is as unknown as a missing one.
    const found = JOB_ID.test(id) ? await deps.jobs.get(id, deps.publicUrl) : null;
    // Another tenant's job is as unknown as a missing one.
    if (!found || !canAccess(c.get('auth'), found.tenant)) throw new ApiError(404, 'job_not_found', `no job ${id}; async runs answer 202 with their id (POST /v1/run/:name with "Prefer: respond-async")`);
    if ('expired' in found) throw new ApiError(404, 'job_expired', `job ${id} finished more than ${deps.jobs.retentionS} s ago and its result has expired (EMBERS_JOB_RETENTION_S)`);
    return found;
  };

  app.get('/:id', async (c) => c.json((await find(c, c.req.param('id'))).view));

  /** A succeeded job's output as a synchronous run would have answered it: its bytes with their type, or its JSON. */
  app.get('/:id/output', async (c) => {
    const id = c.req.param('id');
    const { view } = await find(c, id);
    if (view.status !== 'succeeded') {
      const why = view.error ? `: ${view.error.message}` : view.status === 'queued' || view.status === 'running' ? '; wait for it (GET /v1/jobs/:id until its status is final, or `embers jobs show <id> --wait`)' : '';
      throw new ApiError(409, 'job_not_succeeded', `job ${id} is ${view.status}, so it has no output${why}`);
    }
    const out = view.output as { base64?: unknown } | undefined;
    if (view.outputType !== undefined && typeof out?.base64 === 'string') {
      c.header('content-type', view.outputType);
      return c.body(Buffer.from(out.base64, 'base64') as Uint8Array<ArrayBuffer>);
    }
    return c.json(view.output ?? null);
  });

  /** The job's chunks as Server-Sent Events, after the Last-Event-ID a reconnecting caller sends, then live until it ends (job-events.ts). */
  app.get('/:id/events', async (c) => {
    const id = c.req.param('id');
    await find(c, id);
    const lastEventId = c.req.header('last-event-id');
    const after = resumeAfter(lastEventId);
    if (after === undefined) throw new ApiError(400, 'invalid_last_event_id', `Last-Event-ID "${lastEventId!.slice(0, 40)}" is not the id of an event this stream sent (a chunk's sequence number: 1, 2, …); leave it out to read from the first chunk kept`);
    return jobEvents(c, deps, id, after);
  });

  app.delete('/:id', async (c) => {
    const id = c.req.param('id');
    const found = await find(c, id);
    const job = found.view;
    if (job.status !== 'queued' && job.status !== 'running') throw new ApiError(409, 'job_finished', `job ${id} already ${job.status}; nothing to cancel`);
    // Still queued: finish it as canceled. The replica that reads it later finds it finished and
    // does not run it (JobStore.start); one that started it meanwhile gets the cancel below.
    if (job.status === 'queued') {
      const done = await deps.jobs.finish(id, { httpStatus: 499, body: CANCELED_BODY, canceled: true, timing: undefined, version: '' }, true);
      if (done.finished) {
        const fn = await deps.functions.get(found.fn);
        await recordUsage(deps.redis, { id, tenant: found.tenant, key: found.key, fn: found.fn, version: fn?.manifest.version ?? '', kind: 'async', status: 499, queueMs: Date.now() - Date.parse(job.createdAt), computeMs: 0, inferMs: 0, coldMs: 0, bytesIn: 0, bytesOut: CANCELED_BODY.length, at: new Date().toISOString() });
        if (done.webhook) await enqueueWebhook(deps.webhookQueue, { job: id, url: done.webhook });
        return c.json((await find(c, id)).view);
      }
    }
    // A replica holds it: ask it to abort the handler's signal. It ends canceled if the handler stops.
    if (!(await deps.jobs.requestCancel(id))) throw new ApiError(409, 'job_finished', `job ${id} finished while being canceled`);
    await deps.redis.publish(keys.cancelChannel, `${found.fn} ${id}`);
    // The job as it was when the cancel was recorded: the replica may finish it before a re-read.
    return c.json({ ...job, status: 'running', cancelRequested: true }, 202);
  });
  return app;
}
