// `embers files` — upload, list and delete batch input files (the Files API): a batch is then
// started from one with `embers batch create <function> --file <file_id>`.
import { createReadStream } from 'node:fs';
import { stat } from 'node:fs/promises';
import path from 'node:path';
import { Readable, Transform } from 'node:stream';
import { Command } from 'commander';
import type { FileView } from '../../core/files.ts';
import { errorMessage } from '../client.ts';
import { CliError } from '../errors.ts';
import { ProgressBar, formatBytes } from '../progress.ts';
import { clientFrom, notACommand, printJson, table, withConnection, withTenant } from './common.ts';

type Conn = { url?: string; key?: string; tenant?: string };

export function filesCommand(): Command {
  const cmd = new Command('files').description('batch input files kept in Embers: upload a JSONL file once, start batches from it');

  withTenant(withConnection(cmd.command('list', { isDefault: true }).description('list your files, newest first').argument('[unknown...]').option('--limit <n>', 'how many (1–1000)', '100').option('--json', 'print JSON'))).action(
    async (unknown: string[], opts: Conn & { limit: string; json?: boolean }) => {
      notACommand(cmd, unknown);
      const { data } = await clientFrom(opts).call<{ data: FileView[] }>('GET', `/v1/files?limit=${encodeURIComponent(opts.limit)}`);
      if (opts.json) return printJson(data);
      if (data.length === 0) return void process.stdout.write('no files yet: `embers files upload <file.jsonl>`\n');
      table(['ID', 'FILENAME', 'BYTES', 'PURPOSE', 'CREATED'], data.map((f) => [f.id, f.filename, String(f.bytes), f.purpose, f.createdAt]));
    },
  );

  withTenant(
    withConnection(
      cmd
        .command('upload')
        .description('upload a JSONL file (one {"custom_id": "…", "input": {…}} per line) and print its id')
        .argument('<file>', 'JSONL file')
        .option('--json', 'print the file record as JSON'),
    ),
  ).action(async (file: string, opts: Conn & { json?: boolean }) => {
    const info = await stat(file).catch(() => null);
    if (!info?.isFile()) throw new CliError(`cannot read ${file}: no such file`, 2);
    if (info.size === 0) throw new CliError(`${file} is empty; each line must be {"custom_id": "…", "input": {…}}`, 2);
    const bar = new ProgressBar(`uploading ${file}`, info.size);
    let sent = 0;
    const counted = createReadStream(file).pipe(
      new Transform({
        transform(chunk: Buffer, _enc, cb) {
          bar.update((sent += chunk.length));
          cb(null, chunk);
        },
      }),
    );
    const route = `/v1/files?purpose=batch&filename=${encodeURIComponent(path.basename(file))}`;
    const res = await clientFrom(opts).request<FileView>('POST', route, Readable.toWeb(counted) as ReadableStream, {
      'content-type': 'application/jsonl',
      'content-length': String(info.size),
    });
    if (res.status >= 400) {
      bar.done('failed');
      throw new CliError(`file not uploaded → ${res.status}: ${errorMessage(res.data)}`);
    }
    bar.done(`uploaded ${formatBytes(info.size)}`);
    if (opts.json) return printJson(res.data);
    process.stdout.write(`${res.data.id}\n`);
    process.stderr.write(`start a batch from it with \`embers batch create <function> --file ${res.data.id}\`\n`);
  });

  withTenant(withConnection(cmd.command('delete').description('delete a file (a batch still reading it fails)').argument('<id>'))).action(
    async (id: string, opts: Conn) => {
      await clientFrom(opts).call('DELETE', `/v1/files/${encodeURIComponent(id)}`);
      process.stdout.write(`deleted ${id}\n`);
    },
  );
  return cmd;
}
