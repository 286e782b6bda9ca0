// What the Open Inference Protocol's routes (inference.ts) take and answer, for the OpenAPI
// document. The request is checked by core/oip/request.ts against the protocol and the model's
// own tensors (its metadata); these schemas say the protocol's shapes.
import { z } from 'zod';
import { FunctionName } from '../../core/contracts.ts';
import { DATATYPES, TensorSpecSchema } from '../../core/oip/datatypes.ts';
import { bytes, type Operation, type RouteGroup } from '../openapi/operation.ts';

const Parameters = z.record(z.string(), z.union([z.string(), z.number(), z.boolean()])).describe('`$parameters`: strings, numbers and booleans');

const RequestInput = z.object({
  name: z.string(),
  shape: z.array(z.number().int().min(0)),
  datatype: z.enum(DATATYPES),
  parameters: Parameters.optional().describe('`binary_data_size`: the tensor comes as that many bytes after the JSON header'),
  data: z.array(z.unknown()).optional().describe('row-major elements, flat or nested as the shape'),
});

const InferRequest = z
  .object({
    id: z.string().optional().describe('echoed in the response'),
    parameters: Parameters.optional().describe('`binary_data_output`: every output as binary'),
    inputs: z.array(RequestInput).min(1),
    outputs: z.array(z.object({ name: z.string(), parameters: Parameters.optional().describe('`binary_data`: this output as binary') })).optional().describe('the outputs to answer with; all when left out'),
  })
  .meta({ id: 'InferenceRequest' });

const InferResponse = z
  .object({
    model_name: z.string(),
    model_version: z.string(),
    id: z.string().optional(),
    outputs: z.array(z.object({ name: z.string(), datatype: z.enum(DATATYPES), shape: z.array(z.number().int()), data: z.array(z.unknown()).optional(), parameters: Parameters.optional().describe('`binary_data_size` when the output follows the header as bytes') })),
  })
  .meta({ id: 'InferenceResponse' });

const ModelMetadata = z.object({ name: z.string(), versions: z.array(z.string()), platform: z.string(), inputs: z.array(TensorSpecSchema), outputs: z.array(TensorSpecSchema) }).meta({ id: 'ModelMetadata' });
const ModelConfig = z.object({
  name: z.string(),
  platform: z.string(),
  backend: z.string(),
  max_batch_size: z.number().int(),
  input: z.array(z.object({ name: z.string(), data_type: z.string(), dims: z.array(z.number().int()) })),
  output: z.array(z.object({ name: z.string(), data_type: z.string(), dims: z.array(z.number().int()) })),
  dynamic_batching: z.object({ max_queue_delay_microseconds: z.number().int() }).optional(),
});
const ProtocolError = z.object({ error: z.string() }).meta({ id: 'InferenceError' });
const Model = z.object({ name: FunctionName });
const ModelVersion = z.object({ name: FunctionName, version: z.string().describe('the active version: `v3` or `3`') });

/** The model routes, once at /models/:name and once at /models/:name/versions/:version. */
function modelOperations(versioned: boolean): Operation[] {
  const at = versioned ? '/models/:name/versions/:version' : '/models/:name';
  const params = versioned ? ModelVersion : Model;
  const suffix = versioned ? 'Version' : '';
  const notFound = { 404: versioned ? 'no such model, or not its active version' : 'no such model (another tenant\'s included)', 400: 'the function takes no tensors' };
  return [
    { method: 'get', path: at, id: `getModelMetadata${suffix}`, summary: 'Model metadata: its tensors', access: 'read', actsForTenant: true, params, responses: { 200: { description: 'inputs and outputs, -1 for a dimension of any size', content: { 'application/json': ModelMetadata } } }, errors: notFound },
    { method: 'get', path: `${at}/config`, id: `getModelConfig${suffix}`, summary: 'Triton\'s model configuration', access: 'read', actsForTenant: true, params, responses: { 200: { description: 'with max_batch_size, dims without the batch dimension', content: { 'application/json': ModelConfig } } }, errors: notFound },
    { method: 'get', path: `${at}/ready`, id: `getModelReady${suffix}`, summary: 'Whether the model can take requests', description: 'A model at zero replicas is ready; one whose replicas fail to start answers 400.', access: 'read', actsForTenant: true, params, responses: { 200: { description: 'ready', content: { 'application/json': z.object({ name: z.string(), ready: z.boolean() }) } } }, errors: { ...notFound, 400: 'not ready (its replicas cannot start), or the function takes no tensors' } },
    {
      method: 'post',
      path: `${at}/infer`,
      id: `infer${suffix}`,
      summary: 'Run the model',
      description: 'Tensors as JSON `data`, or as bytes after the JSON header (binary tensor extension: `Inference-Header-Content-Length`). The same admission, queue, metering and `Server-Timing` as `POST /v1/run/{name}`. Errors are `{ "error": message }`.',
      access: 'run',
      actsForTenant: true,
      params,
      headers: z.object({ 'inference-header-content-length': z.string().optional().describe('the JSON header\'s length in bytes; binary tensors follow it') }),
      body: { content: { 'application/json': InferRequest, 'application/octet-stream': bytes('the JSON header, then the binary tensors') } },
      responses: {
        200: {
          description: 'the outputs',
          content: { 'application/json': InferResponse, 'application/octet-stream': bytes('the JSON header, then the binary outputs') },
          headers: { 'inference-header-content-length': 'with binary outputs: the JSON header\'s length', 'server-timing': 'where the time went' },
        },
        400: { description: 'refused by the protocol: a missing, unknown or ill-typed input, data that does not fill its shape, …', content: { 'application/json': ProtocolError } },
      },
      errors: { 404: notFound[404], 429: 'the key\'s limits, the function\'s queue, or `budget_exhausted` (the tenant\'s monthly budget: Retry-After is the seconds to the month\'s end); see Retry-After', 503: 'replicas cannot start, Redis full or unreachable', 504: 'not answered within the queue limit plus the timeout' },
    },
  ];
}

export const inferenceOperations: RouteGroup = {
  tag: 'inference protocol',
  description: 'The KServe v2 Open Inference Protocol, with Triton\'s binary tensor extension and model configuration: functions that take tensors as models.',
  operations: [
    { method: 'get', path: '/', id: 'getServerMetadata', summary: 'Server metadata', access: 'public', responses: { 200: { description: 'name, version and extensions', content: { 'application/json': z.object({ name: z.string(), version: z.string(), extensions: z.array(z.string()) }) } } } },
    { method: 'get', path: '/health/live', id: 'getServerLive', summary: 'Whether the server runs', access: 'public', responses: { 200: { description: 'live', content: { 'application/json': z.object({ live: z.boolean() }) } } } },
    { method: 'get', path: '/health/ready', id: 'getServerReady', summary: 'Whether the server can take requests', access: 'public', responses: { 200: { description: 'ready', content: { 'application/json': z.object({ ready: z.boolean() }) } }, 400: { description: 'not ready: Redis, S3 or the reply channel is not there', content: { 'application/json': z.object({ ready: z.boolean() }) } } } },
    ...modelOperations(false),
    ...modelOperations(true),
  ],
};
