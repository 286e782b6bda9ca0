// The bare path: Embers' hops for a sync request with nothing else on them, to measure what the
// design itself costs on a machine (bench/floor.ts). A Hono server parses the JSON body and adds
// it to a Redis stream (one call per tick), a worker reads the stream (one blocking XREADGROUP
// for many), hands each request to a child process over a pipe and back, and acknowledges,
// deletes and publishes the tick's replies in one pipeline; the server answers from its
// subscription. No keys, quotas, metering, logging, metrics, timing or sandbox.
//   node --import tsx bench/bare-path.ts gateway <redis url>   prints `listening <port>`
//   node --import tsx bench/bare-path.ts worker <redis url>    prints `ready`
//   (the worker starts `bare-path.ts handler` itself: JSON lines on stdin and stdout)
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import type http from 'node:http';
import { serve } from '@hono/node-server';
import { Hono } from 'hono';
import { Redis } from 'ioredis';

const [role, url] = process.argv.slice(2);
const STREAM = 'bare:requests';
const GROUP = 'bare';
const REPLIES = 'bare:replies';

if (role === 'gateway') {
  const redis = new Redis(url, { enableAutoPipelining: true });
  const sub = new Redis(url);
  const waiting = new Map<number, (body: string) => void>();
  let next = 1;
  await sub.subscribe(REPLIES);
  sub.on('message', (_channel: string, message: string) => {
    for (const [id, body] of JSON.parse(message) as [number, string][]) {
      waiting.get(id)?.(body);
      waiting.delete(id);
    }
  });
  const app = new Hono();
  app.post('/run', async (c) => {
    const text = await c.req.text();
    const input: unknown = JSON.parse(text);
    const id = next++;
    const answer = new Promise<string>((resolve) => waiting.set(id, resolve));
    await redis.xadd(STREAM, '*', 'd', JSON.stringify({ id, input }));
    c.header('content-type', 'application/json');
    return c.body(await answer);
  });
  const server = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' }, (info) => process.stdout.write(`listening ${info.port}\n`)) as http.Server;
  server.keepAliveTimeout = 120_000;
} else if (role === 'worker') {
  const redis = new Redis(url, { enableAutoPipelining: true });
  const reader = new Redis(url);
  await redis.xgroup('CREATE', STREAM, GROUP, '$', 'MKSTREAM').catch(() => 0);
  const child = spawn(process.execPath, ['--import', 'tsx', new URL(import.meta.url).pathname, 'handler'], { stdio: ['pipe', 'pipe', 'inherit'] });
  const entries = new Map<number, string>();
  let done: [number, string][] = [];
  createInterface({ input: child.stdout! }).on('line', (line) => {
    const [id, body] = JSON.parse(line) as [number, string];
    if (!done.length) setImmediate(finish);
    done.push([id, body]);
  });
  const finish = () => {
    const replies = done;
    done = [];
    const ids = replies.map(([id]) => entries.get(id)!);
    for (const [id] of replies) entries.delete(id);
    redis.xack(STREAM, GROUP, ...ids).catch(() => 0);
    redis.xdel(STREAM, ...ids).catch(() => 0);
    redis.publish(REPLIES, JSON.stringify(replies)).catch(() => 0);
  };
  process.stdout.write('ready\n');
  for (;;) {
    const res = (await reader.xreadgroup('GROUP', GROUP, 'w', 'COUNT', 64, 'BLOCK', 1000, 'STREAMS', STREAM, '>')) as [string, [string, string[]][]][] | null;
    for (const [entry, fields] of res?.[0][1] ?? []) {
      const { id, input } = JSON.parse(fields[1]) as { id: number; input: unknown };
      entries.set(id, entry);
      child.stdin!.write(`${JSON.stringify({ id, input })}\n`);
    }
  }
} else if (role === 'handler') {
  createInterface({ input: process.stdin }).on('line', (line) => {
    const { id, input } = JSON.parse(line) as { id: number; input: unknown };
    process.stdout.write(`${JSON.stringify([id, JSON.stringify(input)])}\n`);
  });
} else {
  process.stderr.write('usage: bare-path.ts gateway|worker <redis url>\n');
  process.exit(2);
}
