// `embers usage export` — a period's raw usage records (one JSON line per request) to a file or
// stdout, with a line on stderr saying how far it got.
import { createWriteStream } from 'node:fs';
import { Readable, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { Command } from 'commander';
import { errorMessage } from '../client.ts';
import { CliError } from '../errors.ts';
import { clientFrom, withConnection } from './common.ts';

export function usageExportCommand(): Command {
  return withConnection(
    new Command('export')
      .description('raw usage records of a period as JSONL, one per request, in time order (the tenant of your key; any with --tenant and the admin key)')
      .requiredOption('--from <when>', 'start, ISO date or time')
      .requiredOption('--to <when>', 'end, exclusive; at most 93 days after --from')
      .option('--tenant <id>', 'one tenant (with --key set to the admin key)')
      .option('-o, --out <file>', 'write to a file instead of stdout'),
  ).action(async (opts: { url?: string; key?: string; from: string; to: string; tenant?: string; out?: string }) => {
    const route = `/v1/usage/export?${new URLSearchParams({ from: opts.from, to: opts.to })}`;
    const res = await clientFrom(opts).send('GET', route);
    if (!res.ok) throw new CliError(`GET ${route} → ${res.status}: ${errorMessage(await res.json().catch(() => null))}`);
    const progress = new ExportProgress();
    // stdout stays open after: ending it would cut off whatever shares it next (a shell's next command on a socket).
    await pipeline(Readable.fromWeb(res.body as never), progress.counter(), opts.out ? createWriteStream(opts.out) : process.stdout, { end: opts.out !== undefined }).catch((err: NodeJS.ErrnoException) => {
      // A closed pipe (`… | head`) is the reader's choice, not an error.
      if (err.code === 'EPIPE') return;
      throw new CliError(`cannot write ${opts.out ?? 'to stdout'}: ${err.message}`);
    });
    progress.done();
  });
}

/** Records so far and the time of the latest, redrawn on a terminal at most twice a second. */
class ExportProgress {
  private records = 0;
  private at = '';
  private shownAt = 0;
  private readonly out = process.stderr;

  counter(): Transform {
    return new Transform({
      transform: (chunk: Buffer, _enc, done) => {
        let last = -1;
        for (let i = chunk.indexOf(10); i >= 0; i = chunk.indexOf(10, i + 1)) {
          this.records++;
          last = i;
        }
        if (last >= 0 && this.out.isTTY && Date.now() - this.shownAt > 500) {
          // The newest record's time, from the last whole line of the chunk.
          const m = /"at":"([^"]+)"/.exec(chunk.subarray(chunk.lastIndexOf(10, last - 1) + 1, last).toString());
          if (m) this.at = m[1];
          this.shownAt = Date.now();
          this.out.write(`\rexporting usage: ${this.records} records${this.at ? `, through ${this.at}` : ''}`);
        }
        done(null, chunk);
      },
    });
  }

  done(): void {
    this.out.write(`${this.out.isTTY ? '\r\x1b[2K' : ''}exported ${this.records} usage record${this.records === 1 ? '' : 's'}\n`);
  }
}
