// `embers tail <fn>` — a function's logs, live, from every replica (GET /v1/functions/:name/tail).
import { Command, Option } from 'commander';
import { errorMessage, jsonOrText } from '../client.ts';
import { CliError } from '../errors.ts';
import { readEvents } from '../sse.ts';
import { formatTailEvent, type TailFormat } from '../tail-format.ts';
import { clientFrom, withConnection, withTenant } from './common.ts';

interface TailOptions {
  url?: string;
  key?: string;
  tenant?: string;
  status?: string;
  version?: string;
  search?: string;
  format: TailFormat;
}

export function tailCommand(): Command {
  return withTenant(
    withConnection(
      new Command('tail')
        .description("follow a function's logs live: its handlers' ctx.log lines and a line per finished request, from every replica (Ctrl-C to stop)")
        .argument('<name>', 'function name')
        .option('--status <status>', 'only requests that ended so, with their log lines: ok, error, or a status code such as 404')
        .option('--version <version>', 'only lines of this version (v1, v2, …)')
        .option('--search <text>', "only log lines containing this text (in the message, fields or request id), and those requests' summaries")
        .addOption(new Option('--format <format>', 'pretty: for a person; json: one JSON object per line').choices(['pretty', 'json']).default('pretty')),
    ),
  ).action(async (name: string, opts: TailOptions) => {
    const query = new URLSearchParams();
    for (const k of ['status', 'version', 'search'] as const) if (opts[k] !== undefined) query.set(k, opts[k]);
    const route = `/v1/functions/${encodeURIComponent(name)}/tail${query.size ? `?${query}` : ''}`;
    // Ctrl-C ends the tail, once what was printed is out; the gateway hears the connection close.
    const stop = () => process.stdout.write('', () => process.exit(0));
    process.once('SIGINT', stop);
    process.once('SIGTERM', stop);
    const res = await clientFrom(opts).send('GET', route, undefined, { accept: 'text/event-stream' });
    if (res.status >= 400) throw new CliError(`tail ${name} → ${res.status}: ${errorMessage(jsonOrText(await res.text()))}`);
    try {
      for await (const e of readEvents(res.body!)) {
        if (e.event === 'tailing') {
          process.stderr.write(`tailing ${name} (Ctrl-C to stop)\n`);
          continue;
        }
        const text = formatTailEvent(e, opts.format);
        if (text !== null) process.stdout.write(text);
      }
    } catch (err) {
      throw new CliError(`tail ${name}: the connection was lost (${(err as Error).message})`);
    }
    throw new CliError(`tail ${name}: the gateway ended the tail (restarted?); run it again`);
  });
}
