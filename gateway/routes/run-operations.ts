// What POST /v1/run/:name (run.ts) takes and answers, for the OpenAPI document. Its body is the
// function's own input: the document gives each deployed function a path with that schema
// (gateway/openapi/function-paths.ts). The handler checks the name with FUNCTION_NAME, which
// FunctionName wraps, and the webhook with webhookOf (a URL's host is more than a pattern).
import { z } from 'zod';
import { FunctionName } from '../../core/contracts.ts';
import { anyJson, bytes, type RouteGroup } from '../openapi/operation.ts';

const RunParams = z.object({ name: FunctionName });

const RunQuery = z.object({
  webhook: z.string().optional().describe('with `Prefer: respond-async`: an http(s) URL on a public address, POSTed the finished job (signed: `GET /v1/webhooks/secret`)'),
});

const RunHeaders = z.object({
  prefer: z.string().optional().describe('`respond-async`: queue the run and answer 202 with its job at once'),
  accept: z.string().optional().describe('`text/event-stream`: a streaming handler\'s chunks as Server-Sent Events as they come (`chunk`, then `done` with the timing, or `error`)'),
  'embers-webhook': z.string().optional().describe('the same as `?webhook=`'),
  'embers-version-key': z.string().optional().describe('while traffic is split between two versions: requests with the same key go to the same version, on every gateway (without one, each request is drawn by the shares)'),
});

const AcceptedSchema = z.object({
  id: z.string().describe('the job: `GET /v1/jobs/{id}`'),
  status: z.literal('queued'),
  url: z.string(),
});

export const runOperations: RouteGroup = {
  tag: 'run',
  description: 'Run a function on one input: synchronously, or as an async job.',
  operations: [
    {
      method: 'post',
      path: '/:name',
      id: 'runFunction',
      summary: 'Run a function',
      description:
        'Checks the body against the function\'s input schema, queues it, and answers the handler\'s result: its JSON, or bytes with their own Content-Type. A function with `binaryInput` also takes its bytes as the whole body, with their own Content-Type. `Server-Timing` splits the time (queue, input, batch, infer, output, handler, total). A handler\'s own errors (`HandlerError`) answer with its status and the error body.',
      access: 'run',
      actsForTenant: true,
      params: RunParams,
      query: RunQuery,
      headers: RunHeaders,
      body: { description: 'the function\'s input as JSON (each function\'s own path gives its schema), or the bytes of its `binaryInput`', content: { 'application/json': anyJson('the input'), 'application/octet-stream': bytes('the bytes of a function\'s `binaryInput`, with their own Content-Type') } },
      responses: {
        200: {
          description: 'the handler\'s result',
          content: {
            'application/json': anyJson('what the handler returned (a streaming handler\'s chunks gathered as an array)'),
            'application/octet-stream': bytes('what a handler answered with `binary()`, with its own Content-Type'),
            'text/event-stream': { jsonSchema: { type: 'string', description: 'with `Accept: text/event-stream`: the chunks as Server-Sent Events' } },
          },
          headers: { 'server-timing': 'where the time went', 'embers-cold-start': 'when the request waited for a replica to start: its phases in ms', 'embers-version': 'the version of the function that answered' },
        },
        202: {
          description: 'with `Prefer: respond-async`: queued as a job',
          content: { 'application/json': AcceptedSchema },
          headers: { location: 'the job\'s URL', 'preference-applied': '`respond-async`' },
        },
      },
      errors: {
        400: '`invalid_input` (the input does not match the schema: `details` lists the failed checks), `invalid_json`, `too_deep`, `invalid_webhook`',
        404: '`function_not_found`',
        410: '`function_deleted`: deleted (forced) before the request ran',
        413: '`too_large`: over EMBERS_MAX_BODY_BYTES',
        415: '`unsupported_media_type`: not JSON, and the function takes no bytes (or a multipart form)',
        429: '`rate_limited`, `too_many_in_flight` (the key\'s limits), `queue_full` (the function\'s maxQueueLength), or `budget_exhausted` (the tenant reached a monthly budget: Retry-After is the seconds to the end of the UTC month); see Retry-After',
        503: '`replica_start_failed`, `redis_full` (see Retry-After) or `unavailable`',
        504: '`timeout`: not answered within the queue limit plus the function\'s timeoutMs',
      },
    },
  ],
};
