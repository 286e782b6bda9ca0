// `embers batch` — submit a JSONL file as a bulk batch, follow it, cancel it, fetch its files.
import { createReadStream, createWriteStream } from 'node:fs';
import { stat } from 'node:fs/promises';
import { Readable, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { Command } from 'commander';
import { BATCH_TERMINAL, type BatchView } from '../../core/batches.ts';
import { errorMessage, type EmbersClient } from '../client.ts';
import { CliError } from '../errors.ts';
import { ProgressBar } from '../progress.ts';
import { clientFrom, printJson, table, withConnection, withTenant } from './common.ts';

type Conn = { url?: string; key?: string; tenant?: string };

export function batchCommand(): Command {
  const cmd = new Command('batch').description('bulk batch jobs: run a function over a JSONL file, below live traffic');

  withTenant(withConnection(
    cmd
      .command('submit')
      .description('upload a JSONL file (one {"custom_id": "…", "input": {…}} per line) and start a batch')
      .argument('<function>', 'function to run on every line')
      .argument('<file>', 'JSONL input file')
      .option('-w, --wait', 'follow the batch with a progress bar until it finishes')
      .option('--json', 'print the batch as JSON'),
  )).action(async (fn: string, file: string, opts: Conn & { wait?: boolean; json?: boolean }) => {
    const info = await stat(file).catch(() => null);
    if (!info?.isFile()) throw new CliError(`cannot read ${file}: no such file`, 2);
    if (info.size === 0) throw new CliError(`${file} is empty; each line must be {"custom_id": "…", "input": {…}}`, 2);
    const client = clientFrom(opts);
    const bar = new ProgressBar(`uploading ${file}`, info.size);
    let sent = 0;
    const counted = createReadStream(file).pipe(
      new Transform({
        transform(chunk: Buffer, _enc, cb) {
          sent += chunk.length;
          bar.update(sent);
          cb(null, chunk);
        },
      }),
    );
    const res = await client.request<BatchView>('POST', `/v1/batches?function=${encodeURIComponent(fn)}`, Readable.toWeb(counted) as ReadableStream, {
      'content-type': 'application/jsonl',
      'content-length': String(info.size),
    });
    if (res.status >= 400) {
      bar.done('failed');
      throw new CliError(`batch not created → ${res.status}: ${errorMessage(res.data)}`);
    }
    bar.done('uploaded');
    await started(client, res.data, opts);
  });

  withTenant(withConnection(
    cmd
      .command('create')
      .description('start a batch from an uploaded file (`embers files upload`) or an s3:// object of yours')
      .argument('<function>', 'function to run on every line')
      .option('--file <file_id>', 'a file_… from `embers files upload`')
      .option('--input-uri <uri>', 'an s3://bucket/key.jsonl object in your tenant\'s space')
      .option('-w, --wait', 'follow the batch with a progress bar until it finishes')
      .option('--json', 'print the batch as JSON'),
  )).action(async (fn: string, opts: Conn & { file?: string; inputUri?: string; wait?: boolean; json?: boolean }) => {
    if ((opts.file === undefined) === (opts.inputUri === undefined)) throw new CliError('give one of --file <file_id> and --input-uri <s3://…>', 2);
    const client = clientFrom(opts);
    const body = opts.file !== undefined ? { function: fn, input_file_id: opts.file } : { function: fn, input_uri: opts.inputUri };
    await started(client, await client.call<BatchView>('POST', '/v1/batches', body), opts);
  });

  withConnection(cmd.command('status').description('show a batch: status, counts, timestamps').argument('<id>').option('-w, --wait', 'follow it until it finishes').option('--json', 'print JSON')).action(
    async (id: string, opts: Conn & { wait?: boolean; json?: boolean }) => {
      const client = clientFrom(opts);
      const b = opts.wait ? await follow(client, id) : await client.call<BatchView>('GET', `/v1/batches/${encodeURIComponent(id)}`);
      if (opts.json) return printJson(b);
      summary(b);
    },
  );

  withConnection(cmd.command('list').description('list recent batches, newest first').option('--limit <n>', 'how many', '20').option('--json', 'print JSON')).action(
    async (opts: Conn & { limit: string; json?: boolean }) => {
      const { data } = await clientFrom(opts).call<{ data: BatchView[] }>('GET', `/v1/batches?limit=${encodeURIComponent(opts.limit)}`);
      if (opts.json) return printJson(data);
      if (data.length === 0) return void process.stdout.write('no batches yet: `embers batch submit <function> <file.jsonl>`\n');
      const rows = data.map((b) => [b.id, b.function, b.status, `${b.request_counts.completed + b.request_counts.failed}/${b.request_counts.total}`, String(b.request_counts.failed), b.createdAt]);
      table(['ID', 'FUNCTION', 'STATUS', 'DONE', 'FAILED', 'CREATED'], rows);
    },
  );

  withConnection(cmd.command('cancel').description('stop a batch: queued lines are dropped, running ones finish, results so far are kept').argument('<id>')).action(
    async (id: string, opts: Conn) => {
      const b = await clientFrom(opts).call<BatchView>('POST', `/v1/batches/${encodeURIComponent(id)}/cancel`);
      process.stdout.write(`${b.id} ${b.status}\n`);
    },
  );

  withConnection(
    cmd
      .command('output')
      .description("print (or save) a finished batch's output JSONL; --errors for the error file")
      .argument('<id>')
      .option('--errors', 'the errors file instead: {"custom_id", "line", "error"} per failed line')
      .option('-o, --out <file>', 'write to a file instead of stdout'),
  ).action(async (id: string, opts: Conn & { errors?: boolean; out?: string }) => {
    const client = clientFrom(opts);
    const route = `/v1/batches/${encodeURIComponent(id)}/${opts.errors ? 'errors' : 'output'}`;
    const res = await client.send('GET', route);
    if (!res.ok) throw new CliError(`GET ${route} → ${res.status}: ${errorMessage(await res.json().catch(() => null))}`);
    // stdout stays open after: ending it would cut off whatever shares it next (a shell's next command on a socket).
    await pipeline(Readable.fromWeb(res.body as never), opts.out ? createWriteStream(opts.out) : process.stdout, { end: opts.out !== undefined }).catch((err: NodeJS.ErrnoException) => {
      // A closed pipe (`… | head`) is the reader's choice, not an error.
      if (err.code === 'EPIPE') return;
      throw new CliError(`cannot write ${opts.out ?? 'to stdout'}: ${err.message}`);
    });
  });
  return cmd;
}

/** A batch just created: its id (or JSON), or, with --wait, followed to its end. */
async function started(client: EmbersClient, batch: BatchView, opts: { wait?: boolean; json?: boolean }): Promise<void> {
  if (!opts.wait) {
    if (opts.json) return printJson(batch);
    process.stdout.write(`${batch.id}\n`);
    process.stderr.write(`follow it with \`embers batch status ${batch.id}\`; fetch results with \`embers batch output ${batch.id}\`\n`);
    return;
  }
  const final = await follow(client, batch.id);
  if (opts.json) printJson(final);
  else summary(final);
  if (final.status === 'failed') process.exitCode = 1;
}

/** Polls the batch with a progress bar of lines done until it finishes. */
async function follow(client: EmbersClient, id: string): Promise<BatchView> {
  let bar: ProgressBar | undefined;
  let pausedSince: string | undefined;
  for (;;) {
    const b = await client.call<BatchView>('GET', `/v1/batches/${encodeURIComponent(id)}`);
    const { total, completed, failed } = b.request_counts;
    if (total > 0) {
      bar ??= new ProgressBar(`${id} ${b.function}`, total, process.stderr, String);
      bar.setTotal(total);
      bar.update(completed + failed);
    }
    if (BATCH_TERMINAL.includes(b.status)) {
      bar?.done(`${b.status}: ${completed} completed, ${failed} failed`);
      return b;
    }
    if (b.paused?.since !== pausedSince) {
      pausedSince = b.paused?.since;
      if (b.paused) process.stderr.write(`\npaused: ${b.paused.message}\n`);
    }
    await new Promise((r) => setTimeout(r, 500));
  }
}

function summary(b: BatchView): void {
  const c = b.request_counts;
  const lines = [
    `${b.id}  ${b.function}  ${b.status}`,
    `  lines      ${c.total} total, ${c.completed} completed, ${c.failed} failed`,
    `  created    ${b.createdAt}`,
    ...(['inProgressAt', 'finalizingAt', 'completedAt', 'cancellingAt', 'cancelledAt', 'failedAt'] as const).filter((k) => b[k]).map((k) => `  ${k.replace(/At$/, '').padEnd(10)} ${b[k]}`),
    ...(b.error ? [`  error      ${b.error}`] : []),
    ...(b.paused ? [`  paused     since ${b.paused.since}: ${b.paused.message}`] : []),
    ...(b.outputUri ? [`  output     ${b.outputUri}  (embers batch output ${b.id})`, `  errors     ${b.errorsUri}  (embers batch output ${b.id} --errors)`] : []),
  ];
  process.stdout.write(`${lines.join('\n')}\n`);
}
