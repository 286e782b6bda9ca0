// /v1/jobs/:id — async runs: read the status and result, follow their chunks as events, or cancel.
import { Hono, type Context } from 'hono';
import { z } from 'zod';
import { canAccess } from '../../core/tenants.ts';
import { chargeOf, pricesFor } from '../../core/pricing.ts';
import { recordUsage } from '../../core/usage.ts';
import { actingTenant, ActingTenantQuery, requireScope } from '../middleware/auth.ts';
import { limitParam, readQuery } from '../request-query.ts';
import { CANCELED_BODY, enqueueWebhook, JOB_ID } from '../../core/jobs.ts';
import { ApiError } from '../errors.ts';
import type { GatewayDeps, GatewayEnv } from '../deps.ts';
import { keys } from '../../core/keys.ts';
import { resumeAfter } from '../../core/chunks.ts';
import { jobEvents } from '../job-events.ts';
import { anyJson, bytes, type RouteGroup } from '../openapi/operation.ts';

const ListQuery = z.object({ limit: limitParam(1000, 50), tenant: ActingTenantQuery.shape.tenant });

const JobParams = z.object({ id: z.string().regex(JOB_ID).describe('`job_…`, from the 202 of an async run') });

const TimingSchema = z
  .object({ queueMs: z.number(), handlerMs: z.number(), inferMs: z.number(), batchMs: z.number(), execMs: z.number(), inputMs: z.number(), outputMs: z.number() })
  .describe('as a sync run\'s Server-Timing splits it');

/** JobView (core/jobs.ts) as the API answers it. */
const JobSchema = z
  .object({
    id: z.string(),
    function: z.string(),
    version: z.string().optional(),
    status: z.enum(['queued', 'running', 'succeeded', 'failed', 'canceled']),
    createdAt: z.string(),
    startedAt: z.string().optional(),
    finishedAt: z.string().optional(),
    httpStatus: z.number().int().optional().describe('the status a sync run would have answered'),
    timing: TimingSchema.optional(),
    output: z.unknown().optional().describe('a succeeded job\'s result; for bytes, `{ contentType, base64 }`'),
    outputType: z.string().optional().describe('the Content-Type of a result that is bytes'),
    error: z.object({ code: z.string(), message: z.string() }).optional(),
    cancelRequested: z.boolean().optional(),
    webhook: z.string().optional(),
    url: z.string(),
  })
  .meta({ id: 'Job' });

export function jobRoutes(deps: GatewayDeps) {
  const app = new Hono<GatewayEnv>();

  const find = async (c: Context<GatewayEnv>, id: string) => {
    requireScope(c, 'run');
    // A malformed id (`<id>:gone` names the tombstone's key) is as unknown as a missing one.
    const found = JobParams.shape.id.safeParse(id).success ? await deps.jobs.get(id, deps.publicUrl) : null;
    // Another tenant's job is as unknown as a missing one.
    if (!found || !canAccess(c.get('auth'), found.tenant)) throw new ApiError(404, 'job_not_found', `no job ${id}; async runs answer 202 with their id (POST /v1/run/:name with "Prefer: respond-async")`);
    if ('expired' in found) throw new ApiError(404, 'job_expired', `job ${id} finished more than ${deps.jobs.retentionS} s ago and its result has expired (EMBERS_JOB_RETENTION_S)`);
    return { ...found, view: found.view satisfies z.output<typeof JobSchema> };
  };

  app.get('/', async (c) => {
    requireScope(c, 'run');
    const { limit } = readQuery(c, ListQuery);
    return c.json({ data: await deps.jobs.list(actingTenant(c), limit, deps.publicUrl) } satisfies { data: z.output<typeof JobSchema>[] });
  });

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
        // Charged as a replica would have charged it unrun: its request price, at the active version's prices.
        const price = pricesFor(fn?.manifest.pricing, deps.defaultPricing);
        await recordUsage(deps.redis, { id, tenant: found.tenant, key: found.key, fn: found.fn, version: fn?.manifest.version ?? '', kind: 'async', status: 499, queueMs: Date.now() - Date.parse(job.createdAt), computeMs: 0, inferMs: 0, coldMs: 0, bytesIn: 0, bytesOut: CANCELED_BODY.length, at: new Date().toISOString(), price, cost: chargeOf(price, 0) });
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

const NOT_FOUND = { 404: '`job_not_found` (none, or another tenant\'s) or `job_expired` (finished longer ago than EMBERS_JOB_RETENTION_S)' };

export const jobOperations: RouteGroup = {
  tag: 'jobs',
  description: 'Async runs (`POST /v1/run/{name}` with `Prefer: respond-async`): their status and result.',
  operations: [
    {
      method: 'get',
      path: '/',
      id: 'listJobs',
      summary: 'List the tenant\'s jobs',
      description: 'Newest first, while their records are kept (EMBERS_JOB_RETENTION_S after they finish); without outputs and errors, which `GET /v1/jobs/{id}` has.',
      access: 'run',
      actsForTenant: true,
      query: ListQuery,
      responses: { 200: { description: 'the jobs', content: { 'application/json': z.object({ data: z.array(JobSchema) }) } } },
    },
    { method: 'get', path: '/:id', id: 'getJob', summary: 'Show a job', access: 'run', params: JobParams, responses: { 200: { description: 'the job', content: { 'application/json': JobSchema } } }, errors: NOT_FOUND },
    {
      method: 'get',
      path: '/:id/output',
      id: 'getJobOutput',
      summary: 'A succeeded job\'s output',
      description: 'As a sync run would have answered it: its JSON, or its bytes with their Content-Type.',
      access: 'run',
      params: JobParams,
      responses: { 200: { description: 'the output', content: { 'application/json': anyJson('the handler\'s result'), 'application/octet-stream': bytes('a result that is bytes, with its own Content-Type') } } },
      errors: { ...NOT_FOUND, 409: '`job_not_succeeded`: queued, running, failed or canceled' },
    },
    {
      method: 'get',
      path: '/:id/events',
      id: 'getJobEvents',
      summary: 'A job\'s chunks as Server-Sent Events',
      description: 'A streaming handler\'s chunks (`event: chunk`, `id` its number, `data` its JSON), replayed after `Last-Event-ID` when a reader reconnects, then followed live; the last event is the job\'s outcome (`done` or `error`). A job whose handler returns sends its result as one chunk.',
      access: 'run',
      params: JobParams,
      headers: z.object({ 'last-event-id': z.string().optional().describe('the last chunk number the reader saw: the stream resumes after it') }),
      responses: { 200: { description: 'the events', content: { 'text/event-stream': { jsonSchema: { type: 'string', description: 'Server-Sent Events' } } } } },
      errors: { ...NOT_FOUND, 400: '`invalid_last_event_id`: not a chunk number this stream sent' },
    },
    {
      method: 'delete',
      path: '/:id',
      id: 'cancelJob',
      summary: 'Cancel a job',
      description: 'A queued job ends canceled at once (200); a running one has its handler\'s `ctx.signal` aborted (202), and ends canceled if the handler stops.',
      access: 'run',
      params: JobParams,
      responses: { 200: { description: 'canceled', content: { 'application/json': JobSchema } }, 202: { description: 'running: cancel requested', content: { 'application/json': JobSchema } } },
      errors: { ...NOT_FOUND, 409: '`job_finished`: nothing to cancel' },
    },
  ],
};
