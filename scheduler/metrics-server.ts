// A node agent's /metrics listener (EMBERS_METRICS_HOST, EMBERS_METRICS_PORT): plain HTTP and no
// key, so it must be reachable by Prometheus alone (a loopback address, or a network policy). It
// names every function that ran on the node, as a gateway's /metrics does for the admin key.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Logger } from '../core/log.ts';

export interface MetricsServer {
  url: string;
  close(): Promise<void>;
}

export class MetricsServerError extends Error {
  override name = 'MetricsServerError';
}

export async function serveMetrics(o: { host: string; port: number; log: Logger; render: () => Promise<{ contentType: string; body: string }> }): Promise<MetricsServer> {
  const server: Server = createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0];
    if (path !== '/metrics') return void res.writeHead(404, { 'content-type': 'text/plain' }).end('not found: this listener serves /metrics only\n');
    if (req.method !== 'GET' && req.method !== 'HEAD') return void res.writeHead(405, { allow: 'GET, HEAD', 'content-type': 'text/plain' }).end('GET /metrics\n');
    o.render().then(
      ({ contentType, body }) => res.writeHead(200, { 'content-type': contentType }).end(req.method === 'HEAD' ? undefined : body),
      (err: Error) => {
        o.log.warn({ err: err.message }, 'could not render /metrics');
        res.writeHead(500, { 'content-type': 'text/plain' }).end('could not render the metrics\n');
      },
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', (err: NodeJS.ErrnoException) =>
      reject(new MetricsServerError(err.code === 'EADDRINUSE' ? `port ${o.port} on ${o.host} is already in use: stop what holds it, or set EMBERS_METRICS_PORT (0 turns /metrics off)` : `cannot listen on ${o.host}:${o.port} (EMBERS_METRICS_HOST, EMBERS_METRICS_PORT): ${err.message}`)),
    );
    server.listen(o.port, o.host, () => resolve());
  });
  const { port } = server.address() as AddressInfo;
  const host = o.host.includes(':') ? `[${o.host}]` : o.host;
  return {
    url: `http://${host}:${port}/metrics`,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
