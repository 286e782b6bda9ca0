// `embers secrets` — a function's secrets, read by its handler as `ctx.env.NAME`. A value comes
// from stdin (piped) or a prompt that does not echo it, never from the command line, where `ps`
// and the shell's history would keep it.
import { Command } from 'commander';
import { ENV_NAME, ENV_NAME_RULE } from '../../core/function-env.ts';
import type { SecretView } from '../../core/secrets.ts';
import { CliError } from '../errors.ts';
import { clientFrom, printJson, table, withConnection, withTenant } from './common.ts';

type Conn = { url?: string; key?: string; tenant?: string };

export function secretsCommand(): Command {
  const cmd = new Command('secrets').description("a function's secrets: values its handler reads as ctx.env.NAME, kept sealed and never shown again");

  withTenant(
    withConnection(
      cmd
        .command('put')
        .description("set a secret (the value from stdin, or a prompt that does not echo it); the function's replicas restart onto it, finishing what they hold")
        .argument('<function>', 'the function')
        .argument('<NAME>', 'the secret\'s name, as ctx.env reads it: upper-case letters, digits and "_"')
        .addHelpText('after', '\nExamples:\n  embers secrets put ocr API_KEY            (asks for the value)\n  printf %s "$TOKEN" | embers secrets put ocr API_KEY\n\nOne trailing newline of piped input is dropped (echo adds one).'),
    ),
  ).action(async (fn: string, name: string, opts: Conn) => {
    checkName(name);
    const value = process.stdin.isTTY ? await promptHidden(`value of ${name}: `) : dropNewline(await readStdin());
    if (!value) throw new CliError(`no value for ${name}: ${process.stdin.isTTY ? 'nothing was typed' : 'stdin was empty'}`, 2);
    const r = await clientFrom(opts).call<SecretView & { version: string }>('PUT', `/v1/functions/${encodeURIComponent(fn)}/secrets/${name}`, value, { 'content-type': 'text/plain; charset=utf-8' });
    process.stdout.write(`${name} set on ${fn}; its replicas move to ${r.version}\n`);
  });

  withTenant(withConnection(cmd.command('list').description("list a function's secrets (names and dates, never values)").argument('<function>').option('--json', 'print JSON'))).action(
    async (fn: string, opts: Conn & { json?: boolean }) => {
      const { data } = await clientFrom(opts).call<{ data: SecretView[] }>('GET', `/v1/functions/${encodeURIComponent(fn)}/secrets`);
      if (opts.json) return printJson(data);
      if (data.length === 0) return void process.stdout.write(`${fn} has no secrets: \`embers secrets put ${fn} NAME\`\n`);
      table(['NAME', 'CREATED', 'UPDATED'], data.map((s) => [s.name, s.createdAt, s.updatedAt]));
    },
  );

  withTenant(withConnection(cmd.command('delete').description("delete a secret; the function's replicas restart without it").argument('<function>').argument('<NAME>'))).action(async (fn: string, name: string, opts: Conn) => {
    checkName(name);
    const r = await clientFrom(opts).call<{ version: string }>('DELETE', `/v1/functions/${encodeURIComponent(fn)}/secrets/${name}`);
    process.stdout.write(`${name} deleted from ${fn}; its replicas move to ${r.version}\n`);
  });
  return cmd;
}

/** Said before a value is asked for, not after it was typed. */
function checkName(name: string): void {
  if (!ENV_NAME.test(name)) throw new CliError(`"${name}" cannot name a secret: ${ENV_NAME_RULE}`, 2);
}

/** `echo value |` adds a newline nobody means as part of the value. */
function dropNewline(s: string): string {
  return s.replace(/\r?\n$/, '');
}

async function readStdin(): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}

/** A line typed at the terminal without echoing it (raw mode); Ctrl-C or Ctrl-D gives up. */
function promptHidden(question: string): Promise<string> {
  const stdin = process.stdin;
  process.stderr.write(question);
  stdin.setRawMode(true);
  stdin.resume();
  stdin.setEncoding('utf8');
  let typed = '';
  return new Promise((resolve, reject) => {
    const done = (err?: Error) => {
      stdin.off('data', onData);
      stdin.setRawMode(false);
      stdin.pause();
      process.stderr.write('\n');
      if (err) reject(err);
      else resolve(typed);
    };
    const onData = (data: string) => {
      for (const ch of data) {
        if (ch === '\r' || ch === '\n') return done();
        if (ch === '\u0003' || ch === '\u0004') return done(new CliError('canceled', 130));
        if (ch === '\u007f' || ch === '\b') typed = typed.slice(0, -1);
        else typed += ch;
      }
    };
    stdin.on('data', onData);
  });
}
