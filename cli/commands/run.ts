import { readFile, writeFile } from 'node:fs/promises';
import { Command } from 'commander';
import { errorMessage, jsonOrText } from '../client.ts';
import { CliError } from '../errors.ts';
import { isJsonType } from '../../core/contracts.ts';
import { clientFrom, withConnection, withTenant } from './common.ts';
import { readEvents } from '../sse.ts';

export function runCommand(): Command {
  return withTenant(withConnection(
    new Command('run')
      .description('call a function and print its JSON result (or save the bytes it answers with: --out)')
      .argument('<name>', 'function name')
      .option('-d, --data <json>', 'input as JSON text')
      .option('-f, --file <path>', 'input from a JSON file ("-" for stdin)')
      .option('-b, --binary <path>', "send this file's bytes as the body (a function with binaryInput, e.g. ocr and a PNG)")
      .option('--content-type <type>', 'with --binary: the Content-Type sent (default: from the file extension)')
      .option('-o, --out <path>', 'write the result to this file instead of stdout (a function answering with bytes, e.g. an image, needs it when stdout is a terminal)')
      .option('-v, --verbose', 'print the request id and Server-Timing to stderr')
      .option('--stream', 'print each chunk as a streaming handler (one that yields) produces it, one JSON line per chunk; a handler that returns prints its answer as one line')
      .option('--async', 'queue it and print the job id at once (follow with `embers jobs show <id> --wait`)')
      .option('--webhook <url>', 'with --async: POST the finished job here (signed; see GET /v1/webhooks/secret)'),
  )).action(async (name: string, opts: RunOptions) => {
    if (opts.webhook && !opts.async) throw new CliError('--webhook needs --async', 2);
    if ([opts.data, opts.file, opts.binary].filter((x) => x !== undefined).length !== 1) {
      throw new CliError('give the input with one of --data \'{"…":…}\', --file input.json or --binary photo.png', 2);
    }
    if (opts.contentType !== undefined && opts.binary === undefined) throw new CliError('--content-type goes with --binary', 2);
    if (opts.out !== undefined && opts.async) throw new CliError('--out goes with a synchronous run; an async job\'s result comes from `embers jobs show <id>`', 2);
    if (opts.stream && (opts.async || opts.out !== undefined)) throw new CliError('--stream prints chunks as they come to stdout: leave out --async and --out (redirect stdout to keep them)', 2);
    const { body, type } = opts.binary !== undefined ? await binaryBody(opts.binary, opts.contentType) : { body: await jsonBody(opts), type: 'application/json' };
    const query = opts.webhook ? `?webhook=${encodeURIComponent(opts.webhook)}` : '';
    const headers: Record<string, string> = { 'content-type': type, ...(opts.async ? { prefer: 'respond-async' } : {}), ...(opts.stream ? { accept: 'text/event-stream' } : {}) };
    const res = await clientFrom(opts).send('POST', `/v1/run/${encodeURIComponent(name)}${query}`, body, headers);
    const answerType = res.headers.get('content-type') ?? '';
    // Events: the timing comes with the last one.
    if (res.status < 400 && answerType.startsWith('text/event-stream')) return printEvents(name, res, opts.verbose ?? false);
    if (opts.verbose) process.stderr.write(`request id ${res.headers.get('x-request-id')}  server-timing ${res.headers.get('server-timing') ?? '-'}\n`);
    const answer = Buffer.from(await res.arrayBuffer());
    const parsed = () => jsonOrText(answer.toString());
    if (res.status >= 400) throw new CliError(`${name} → ${res.status}: ${errorMessage(parsed())}`);
    if (opts.async) return void process.stdout.write(`${(parsed() as { id: string }).id}\n`);
    // --out: the answer's bytes as they came, JSON or not.
    if (opts.out !== undefined) return saveResult(opts.out, answer, answerType || 'unknown type');
    const media = answerType.split(';')[0].trim().toLowerCase();
    if (media === 'application/json' || media.endsWith('+json')) return void process.stdout.write(`${JSON.stringify(parsed(), null, 2)}\n`);
    // Bytes (binary()) as they are: text to any stdout, anything else not to a terminal.
    if (process.stdout.isTTY && !media.startsWith('text/')) {
      const ext = EXTENSIONS[media] ?? 'bin';
      throw new CliError(`${name} answered ${answerType} (${answer.length} bytes), which would garble this terminal: give --out result.${ext}, or redirect stdout (> result.${ext})`);
    }
    process.stdout.write(answer);
  });
}

/**
 * Prints a streamed answer as it comes: each chunk's JSON on a line of its own, then, with
 * --verbose, its timing on stderr; an `error` event fails the command with its message.
 */
async function printEvents(name: string, res: Response, verbose: boolean): Promise<void> {
  for await (const e of readEvents(res.body!)) {
    if (e.event === 'chunk') {
      process.stdout.write(`${e.data}\n`);
      continue;
    }
    if (e.event !== 'done' && e.event !== 'error') continue;
    const end = jsonOrText(e.data) as { status?: number; serverTiming?: string; error?: { message?: string } };
    if (verbose) process.stderr.write(`request id ${res.headers.get('x-request-id')}  server-timing ${end.serverTiming ?? '-'}\n`);
    if (e.event === 'error') throw new CliError(`${name} → ${end.status ?? 'error'}: ${end.error?.message ?? e.data}`);
    return;
  }
  throw new CliError(`${name}: the stream ended before the run did (connection lost?)`);
}

/** Writes a result to `file` as its bytes came, and says so on stderr. */
export async function saveResult(file: string, bytes: Buffer, type: string): Promise<void> {
  await writeFile(file, bytes).catch((err: Error) => {
    throw new CliError(`cannot write ${file}: ${err.message}`);
  });
  process.stderr.write(`wrote ${bytes.length} bytes of ${type} to ${file}\n`);
}

interface RunOptions {
  url?: string;
  key?: string;
  tenant?: string;
  data?: string;
  file?: string;
  binary?: string;
  contentType?: string;
  verbose?: boolean;
  out?: string;
  async?: boolean;
  webhook?: string;
  stream?: boolean;
}

async function jsonBody(opts: RunOptions): Promise<string> {
  const text = opts.data ?? (opts.file === '-' ? await readStdin() : await readFile(opts.file!, 'utf8').catch(() => {
    throw new CliError(`cannot read ${opts.file}`, 2);
  }));
  try {
    JSON.parse(text);
  } catch (err) {
    throw new CliError(`input is not valid JSON: ${(err as Error).message}`, 2);
  }
  return text;
}

/** Content-Types by file extension, for --binary; anything else is application/octet-stream. */
const TYPES: Record<string, string> = {
  png: 'image/png',
  jpg: 'image/jpeg',
  jpeg: 'image/jpeg',
  webp: 'image/webp',
  gif: 'image/gif',
  wav: 'audio/wav',
  mp3: 'audio/mpeg',
  flac: 'audio/flac',
  ogg: 'audio/ogg',
  pdf: 'application/pdf',
};

/** File extensions by Content-Type, for the hint when bytes would go to a terminal. */
const EXTENSIONS: Record<string, string> = Object.fromEntries(Object.entries(TYPES).filter(([ext]) => ext !== 'jpeg').map(([ext, type]) => [type, ext]));

async function binaryBody(path: string, contentType: string | undefined): Promise<{ body: Uint8Array; type: string }> {
  const body = path === '-' ? await readStdinBytes() : await readFile(path).catch(() => {
    throw new CliError(`cannot read ${path}`, 2);
  });
  if (body.length === 0) throw new CliError(`${path === '-' ? 'stdin' : path} is empty`, 2);
  const type = contentType ?? TYPES[/\.([^./]+)$/.exec(path)?.[1]?.toLowerCase() ?? ''] ?? 'application/octet-stream';
  if (isJsonType(type)) throw new CliError(`--content-type ${type} is read as JSON; use --data or --file for JSON, or a type such as application/octet-stream for bytes`, 2);
  return { body, type };
}

async function readStdinBytes(): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

async function readStdin(): Promise<string> {
  return (await readStdinBytes()).toString('utf8');
}
