import { readFile } from 'node:fs/promises';
import { Command } from 'commander';
import { errorMessage } from '../client.ts';
import { CliError } from '../errors.ts';
import { clientFrom, withConnection } from './common.ts';

export function runCommand(): Command {
  return withConnection(
    new Command('run')
      .description('call a function and print its JSON result')
      .argument('<name>', 'function name')
      .option('-d, --data <json>', 'input as JSON text')
      .option('-f, --file <path>', 'input from a JSON file ("-" for stdin)')
      .option('-v, --verbose', 'print the request id and Server-Timing to stderr')
      .option('--async', 'queue it and print the job id at once (follow with `embers jobs show <id> --wait`)')
      .option('--webhook <url>', 'with --async: POST the finished job here (signed; see GET /v1/webhooks/secret)'),
  ).action(async (name: string, opts: { url?: string; key?: string; data?: string; file?: string; verbose?: boolean; async?: boolean; webhook?: string }) => {
    if (opts.webhook && !opts.async) throw new CliError('--webhook needs --async', 2);
    if (opts.data === undefined && opts.file === undefined) throw new CliError('give the input with --data \'{"…":…}\' or --file input.json', 2);
    const text = opts.data ?? (opts.file === '-' ? await readStdin() : await readFile(opts.file!, 'utf8').catch(() => {
      throw new CliError(`cannot read ${opts.file}`, 2);
    }));
    try {
      JSON.parse(text);
    } catch (err) {
      throw new CliError(`input is not valid JSON: ${(err as Error).message}`, 2);
    }
    const query = opts.webhook ? `?webhook=${encodeURIComponent(opts.webhook)}` : '';
    const headers: Record<string, string> = { 'content-type': 'application/json', ...(opts.async ? { prefer: 'respond-async' } : {}) };
    const res = await clientFrom(opts).request('POST', `/v1/run/${encodeURIComponent(name)}${query}`, text, headers);
    if (opts.verbose) process.stderr.write(`request id ${res.headers.get('x-request-id')}  server-timing ${res.headers.get('server-timing') ?? '-'}\n`);
    if (res.status >= 400) throw new CliError(`${name} → ${res.status}: ${errorMessage(res.data)}`);
    if (opts.async) {
      process.stdout.write(`${(res.data as { id: string }).id}\n`);
      return;
    }
    process.stdout.write(`${JSON.stringify(res.data, null, 2)}\n`);
  });
}

async function readStdin(): Promise<string> {
  let s = '';
  for await (const chunk of process.stdin) s += chunk;
  return s;
}
