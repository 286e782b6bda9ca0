// /v1/files — a tenant's batch inputs (anchor: OpenAI's Files API). The body is the JSONL itself,
// or a multipart form with `file` and `purpose=batch` as OpenAI's clients send it; either streams
// to S3 under the tenant's prefix, bounded by EMBERS_MAX_BATCH_BYTES.
import { createReadStream } from 'node:fs';
import { Readable } from 'node:stream';
import { Hono, type Context } from 'hono';
import { z } from 'zod';
import { s3Keys } from '../../core/contracts.ts';
import { DEFAULT_TENANT } from '../../core/names.ts';
import { FILE_PURPOSES, FileStore, fileView, type FileRecord } from '../../core/files.ts';
import { ApiError } from '../errors.ts';
import { actingTenant, requireScope } from '../middleware/auth.ts';
import { spoolMultipart } from '../multipart.ts';
import { storeBody } from '../spool.ts';
import type { GatewayDeps, GatewayEnv } from '../deps.ts';
import { limitParam, readQuery } from '../request-query.ts';
import { jsonLines, type RouteGroup } from '../openapi/operation.ts';

const CONTENT_TYPE = 'application/x-ndjson';

const Purpose = z.enum(FILE_PURPOSES, { error: 'purpose must be "batch" (files hold batch inputs)' });

const UploadQuery = z.object({
  filename: z.string().optional().describe('the name to keep with a JSONL body (a form\'s file has its own)'),
  purpose: Purpose.optional().describe('`batch`, the only purpose (a form may send it as a field)'),
});

const ListQuery = z.object({ limit: limitParam(1000, 100) });

const FileParams = z.object({ id: z.string().describe('`file_…`') });

/** FileView (core/files.ts) as the API answers it. */
const FileSchema = z
  .object({ id: z.string(), object: z.literal('file'), bytes: z.number().int(), filename: z.string(), purpose: z.enum(FILE_PURPOSES), createdAt: z.string() })
  .meta({ id: 'File' });

export function fileRoutes(deps: GatewayDeps) {
  const app = new Hono<GatewayEnv>();
  const { files, store } = deps;

  const tooLarge = () => new ApiError(413, 'too_large', `the file is over ${deps.maxBatchBytes} bytes (EMBERS_MAX_BATCH_BYTES)`);
  const empty = () => new ApiError(400, 'empty_file', 'the file is empty; send JSONL, one {"custom_id": "…", "input": {…}} per line');
  /** A form's purpose field, checked as the query's is. */
  const checkPurpose = (purpose: string | undefined) => {
    if (purpose !== undefined && !Purpose.safeParse(purpose).success) {
      throw new ApiError(400, 'invalid_request', `purpose must be "batch" (files hold batch inputs), got "${purpose.slice(0, 100)}"`);
    }
  };

  app.post('/', async (c) => {
    requireScope(c, 'run');
    const tenant = actingTenant(c);
    if (tenant !== DEFAULT_TENANT && !(await deps.tenants.getTenant(tenant))) throw new ApiError(404, 'tenant_not_found', `no tenant with id "${tenant}"`);
    const id = FileStore.newId();
    const key = s3Keys.file(tenant, id);
    const contentType = c.req.header('content-type') ?? '';
    let bytes: number;
    const query = readQuery(c, UploadQuery);
    let filename = query.filename;
    let purpose: string | undefined = query.purpose;
    if (/^multipart\/form-data\b/i.test(contentType)) {
      if (!c.req.raw.body) throw empty();
      const form = await spoolMultipart(c.req.raw.body, contentType, { fileField: 'file', maxBytes: deps.maxBatchBytes, tooLarge });
      try {
        purpose = form.fields.purpose ?? purpose;
        checkPurpose(purpose);
        filename = form.filename ?? filename;
        bytes = form.file.bytes;
        if (bytes === 0) throw empty();
        await store.put(key, createReadStream(form.file.file), CONTENT_TYPE, bytes);
      } finally {
        await form.file.dispose();
      }
    } else {
      bytes = await storeBody(store, key, c.req.raw.body, Number(c.req.header('content-length') ?? NaN), { maxBytes: deps.maxBatchBytes, tooLarge, empty, what: 'file', contentType: CONTENT_TYPE });
    }
    const record: FileRecord = { id, tenant, uri: store.uri(key), bytes, filename: (filename ?? `${id}.jsonl`).replace(/[\u0000-\u001f\u007f]/g, '').slice(0, 255), purpose: 'batch', createdAt: new Date().toISOString() };
    await files.create(record);
    c.header('location', `${deps.publicUrl}/v1/files/${id}`);
    return c.json(fileView(record) satisfies z.output<typeof FileSchema>, 201);
  });

  app.get('/', async (c) => {
    requireScope(c, 'run');
    const { limit } = readQuery(c, ListQuery);
    return c.json({ object: 'list', data: (await files.list(actingTenant(c), limit)).map(fileView) });
  });

  /** The acting tenant's file :id; a malformed id, a missing file and another tenant's answer alike. */
  const find = async (c: Context<GatewayEnv>): Promise<FileRecord> => {
    requireScope(c, 'run');
    const id = c.req.param('id') ?? '';
    // The tenant first: a ?tenant= the key may not name is refused whether or not the file exists.
    const tenant = actingTenant(c);
    const file = await files.get(id);
    if (!file || file.tenant !== tenant) throw new ApiError(404, 'file_not_found', `no file ${id.slice(0, 100)}; \`embers files list\` shows yours`);
    return file;
  };

  app.get('/:id', async (c) => c.json(fileView(await find(c))));

  app.get('/:id/content', async (c) => {
    const file = await find(c);
    const stream = await store.stream(file.uri);
    c.header('content-type', CONTENT_TYPE);
    c.header('content-length', String(file.bytes));
    return c.body(Readable.toWeb(stream) as ReadableStream);
  });

  app.delete('/:id', async (c) => {
    const file = await find(c);
    // The record goes first: once it is gone no new batch can name the file.
    if (!(await files.delete(file))) throw new ApiError(404, 'file_not_found', `no file ${file.id}; \`embers files list\` shows yours`);
    await store.delete(file.uri);
    return c.json({ id: file.id, object: 'file', deleted: true });
  });

  return app;
}

const NOT_FOUND = { 404: '`file_not_found` (none, or another tenant\'s)' };
const fileAnswer = (description: string) => ({ description, content: { 'application/json': FileSchema } });

export const fileOperations: RouteGroup = {
  tag: 'files',
  description: 'Batch input files (as the OpenAI Files API).',
  operations: [
    {
      method: 'post',
      path: '/',
      id: 'uploadFile',
      summary: 'Upload a file',
      description: 'The JSONL as the body, or a multipart form with `file` and `purpose=batch` as OpenAI\'s clients send it; up to EMBERS_MAX_BATCH_BYTES.',
      access: 'run',
      actsForTenant: true,
      query: UploadQuery,
      body: {
        content: {
          'application/x-ndjson': jsonLines('one `{ "custom_id": "…", "input": {…} }` per line'),
          'multipart/form-data': { jsonSchema: { type: 'object', properties: { file: { type: 'string', format: 'binary' }, purpose: { type: 'string', enum: ['batch'] } }, required: ['file'] } },
        },
      },
      responses: { 201: { ...fileAnswer('stored'), headers: { location: 'the file\'s URL' } } },
      errors: { 400: '`invalid_request` (purpose), `empty_file`', 404: '`tenant_not_found`', 413: '`too_large`: over EMBERS_MAX_BATCH_BYTES' },
    },
    {
      method: 'get',
      path: '/',
      id: 'listFiles',
      summary: 'List files',
      access: 'run',
      actsForTenant: true,
      query: ListQuery,
      responses: { 200: { description: 'the tenant\'s files, newest first', content: { 'application/json': z.object({ object: z.literal('list'), data: z.array(FileSchema) }) } } },
      errors: { 400: '`invalid_request`: limit is not a whole number from 1 to 1000' },
    },
    { method: 'get', path: '/:id', id: 'getFile', summary: 'Show a file', access: 'run', actsForTenant: true, params: FileParams, responses: { 200: fileAnswer('the file') }, errors: NOT_FOUND },
    {
      method: 'get',
      path: '/:id/content',
      id: 'getFileContent',
      summary: 'A file\'s content',
      access: 'run',
      actsForTenant: true,
      params: FileParams,
      responses: { 200: { description: 'its JSONL', content: { 'application/x-ndjson': jsonLines('as uploaded') } } },
      errors: NOT_FOUND,
    },
    {
      method: 'delete',
      path: '/:id',
      id: 'deleteFile',
      summary: 'Delete a file',
      access: 'run',
      actsForTenant: true,
      params: FileParams,
      responses: { 200: { description: 'deleted', content: { 'application/json': z.object({ id: z.string(), object: z.literal('file'), deleted: z.literal(true) }) } } },
      errors: NOT_FOUND,
    },
  ],
};
