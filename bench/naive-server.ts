// The naive baseline: a plain Hono server running the ocr handler on its own ORT sessions,
// each request as it arrives (no queue, no batching, no worker threads), with onnxruntime's
// default session options, as a user would write it. The default intra-op thread count is the
// number of physical cores as onnxruntime finds them (half the logical ones when it cannot tell),
// spinning on: on the 2-vCPU VMs here it comes out 1 thread per session, so the server counts the
// threads its sessions started and reports the figure.
// NAIVE_ORT_THREADS=N sets N threads with the platform's options, spinning off or with NAIVE_ORT_SPIN=1
// spinning while running (the bench's plain-HTTP floor at c = 1 runs one with raw's settings). /ocr answers carry `server-timing: handler;dur=<ms>`.
//   POST /ocr  { image }  → the ocr handler's output
//   POST /cls  { seed }   → the classifier handler's output (bench/functions/cls.ts, the light model)
//   GET  /ping            → { ok: true }
// Prints `listening <port> intra-op <n>` once it serves (port 0 = any free port: NAIVE_PORT); n
// is "?" where the threads cannot be counted.
import { readdirSync } from 'node:fs';
import type http from 'node:http';
import { serve } from '@hono/node-server';
import { Hono } from 'hono';
import { HandlerError } from 'embers';
import clsBatched from './functions/cls-batched.ts';
import { loadOcrFunction } from './ocr-fn.ts';
import { BENCH_PROVIDERS, MODELS, createSession, handlerContext, modelHandle, ort, providersFailed } from './ort.ts';

const threads = process.env.NAIVE_ORT_THREADS ? Number(process.env.NAIVE_ORT_THREADS) : undefined;
const fn = await loadOcrFunction();
const spin = process.env.NAIVE_ORT_SPIN === '1';
const open = (path: string) => (threads ? createSession(path, threads, spin) : ort.InferenceSession.create(path, { executionProviders: BENCH_PROVIDERS }).catch((err: unknown) => Promise.reject(providersFailed(err))));
/** Threads of this process (Linux), to tell how many onnxruntime's sessions started. */
const threadCount = (): number | undefined => {
  try {
    return readdirSync('/proc/self/task').length;
  } catch {
    return undefined;
  }
};
const before = threadCount();
const [det, rec] = await Promise.all([open(MODELS.det), open(MODELS.rec)]);
const intraOp = intraOpThreads(before, threadCount());
const models = { det: modelHandle(det), rec: modelHandle(rec) };
const clsModels = { cls: modelHandle(await open(MODELS.cls)) };
let nextId = 1;

const app = new Hono();
app.get('/ping', (c) => c.json({ ok: true }));
app.post('/ocr', async (c) => {
  const body: unknown = await c.req.json().catch(() => undefined);
  // From the parsed body to the serialised output, as a replica's handler timing.
  const t0 = performance.now();
  const parsed = fn.input.safeParse(body);
  if (!parsed.success) return c.json({ error: { code: 'invalid_input', message: parsed.error.message } }, 400);
  const ctx = handlerContext(models, { name: fn.name, version: 'naive' }, String(nextId++));
  try {
    const out = JSON.stringify(await fn.handler(parsed.data, ctx));
    c.header('server-timing', `handler;dur=${(performance.now() - t0).toFixed(2)}`);
    c.header('content-type', 'application/json');
    return c.body(out);
  } catch (err) {
    if (err instanceof HandlerError) return c.json({ error: { code: err.code, message: err.message } }, err.status as 400);
    return c.json({ error: { code: 'handler_error', message: (err as Error).message } }, 500);
  }
});

// The light model as a user would serve it: the same handler, one request at a time.
app.post('/cls', async (c) => {
  const parsed = clsBatched.input.safeParse(await c.req.json().catch(() => undefined));
  if (!parsed.success) return c.json({ error: { code: 'invalid_input', message: parsed.error.message } }, 400);
  const ctx = handlerContext(clsModels, { name: clsBatched.name, version: 'naive' }, String(nextId++));
  return c.json(await clsBatched.handler(parsed.data, ctx));
});

const server = serve({ fetch: app.fetch, port: Number(process.env.NAIVE_PORT ?? 0), hostname: '127.0.0.1' }, (info) => {
  process.stdout.write(`listening ${info.port} intra-op ${intraOp ?? '?'}\n`);
}) as http.Server;
// ORT runs synchronously here: under load the event loop can stay busy past node's 5 s
// keep-alive timeout, which then closes connections with the next request already sent
// (ECONNRESET on the client). Not what this baseline is about.
server.keepAliveTimeout = 120_000;
// Nothing to flush: open keep-alive connections must not hold the exit up.
process.on('SIGTERM', () => process.exit(0));
process.on('SIGINT', () => process.exit(0));

/**
 * Intra-op threads per session from the threads the two sessions started: onnxruntime starts one
 * for its environment, and k − 1 for a session with k intra-op threads (the caller's thread is the
 * k-th). Checked against NAIVE_ORT_THREADS=1 and 2 on these VMs; undefined when the count does
 * not fit that pattern.
 */
function intraOpThreads(before: number | undefined, after: number | undefined): number | undefined {
  if (before === undefined || after === undefined) return undefined;
  const k = 1 + (after - before - 1) / 2;
  return Number.isInteger(k) && k >= 1 ? k : undefined;
}
