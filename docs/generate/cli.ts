// docs/reference/cli.md: every command of `embers`, read from the commander tree cli/program.ts
// builds (nothing runs): usage, arguments, options with their defaults, and the help text the
// commands add after --help's own.
import type { EventEmitter } from 'node:events';
import type { Argument, Command, Option } from 'commander';
import { buildProgram } from '../../cli/program.ts';
import { linkVariables } from './configuration.ts';
import { code, document, generatedBanner, prose as plain, table } from './markdown.ts';

/** Prose, with the platform's variables it names linked to the configuration reference. */
const prose = (text: string): string => linkVariables(plain(text), 'configuration.md');

export const CLI_SOURCE = 'cli/program.ts and cli/commands/';

/** `<files...>`, `[dir]`: as commander's usage line writes an argument. */
function argumentTerm(a: Argument): string {
  const name = `${a.name()}${a.variadic ? '...' : ''}`;
  return a.required ? `<${name}>` : `[${name}]`;
}

/** A default as --help would show it: strings bare, anything else as JSON. */
function shownValue(value: unknown): string {
  return typeof value === 'string' ? value : JSON.stringify(value);
}

/** The arguments --help lists: all of them where one has a description, else none (the usage line names them). */
function argumentRows(cmd: Command): string[][] {
  return cmd.createHelp().visibleArguments(cmd).map((a) => [
    code(argumentTerm(a)),
    prose([a.description, a.argChoices && `one of ${a.argChoices.map(code).join(', ')}`].filter(Boolean).join('; ')),
    a.defaultValue === undefined ? '' : code(shownValue(a.defaultValue)),
  ]);
}

/** Options as the command declares them, without `-h, --help`, which every command has. */
function optionRows(cmd: Command): string[][] {
  return cmd.options
    .filter((o: Option) => !o.hidden)
    .map((o) => {
      // A flag's default (`--no-deploy`: true) says how the program reads it, not what a person types.
      const takesValue = o.required || o.optional;
      const notes = [o.description, o.argChoices && `one of ${o.argChoices.map(code).join(', ')}`, o.mandatory && 'required', o.envVar && `env ${code(o.envVar)}`];
      return [code(o.flags), prose(notes.filter(Boolean).join('; ')), takesValue && o.defaultValue !== undefined ? code(o.defaultValueDescription ?? shownValue(o.defaultValue)) : ''];
    });
}

/** What addHelpText put before and after the command's own help (`Examples: …`), as printed. */
function addedHelp(cmd: Command): { before: string; after: string } {
  const collect = (event: string) => {
    let text = '';
    // addHelpText registers a listener of `<position>Help`: called with a context, it writes the text.
    for (const listener of (cmd as unknown as EventEmitter).listeners(event)) (listener as (context: object) => void)({ error: false, command: cmd, write: (s: string) => (text += s) });
    return text.replace(/^\n+|\s+$/g, '');
  };
  return { before: [collect('beforeAllHelp'), collect('beforeHelp')].filter(Boolean).join('\n\n'), after: [collect('afterHelp'), collect('afterAllHelp')].filter(Boolean).join('\n\n') };
}

/** The subcommand a group runs when given none (`embers functions` lists), where one is set. */
function defaultSubcommand(cmd: Command): string | undefined {
  return (cmd as unknown as { _defaultCommandName?: string })._defaultCommandName ?? undefined;
}

/** A table whose last column, `default`, is left out where no row has one. */
function withDefaults(head: string[], rows: string[][]): string {
  return rows.some((r) => r[r.length - 1]) ? table(head, rows) : table(head.slice(0, -1), rows.map((r) => r.slice(0, -1)));
}

const fullName = (cmd: Command): string => (cmd.parent ? `${fullName(cmd.parent)} ${cmd.name()}` : cmd.name());
const anchor = (cmd: Command): string => `#${fullName(cmd).replace(/ /g, '-')}`;
const fenced = (text: string): string => `\`\`\`text\n${text}\n\`\`\``;

function commandSection(cmd: Command, depth: number): string[] {
  const help = cmd.createHelp();
  const added = addedHelp(cmd);
  const args = argumentRows(cmd);
  const options = optionRows(cmd);
  const fallback = defaultSubcommand(cmd);
  const blocks = [
    `${'#'.repeat(Math.min(depth, 6))} ${fullName(cmd)}`,
    cmd.aliases().length ? `Also: ${cmd.aliases().map((a) => code(a)).join(', ')}.` : '',
    prose(cmd.description()),
    added.before && fenced(added.before),
    fenced(help.commandUsage(cmd)),
    args.length ? withDefaults(['argument', 'description', 'default'], args) : '',
    options.length ? withDefaults(['option', 'description', 'default'], options) : '',
    cmd.commands.length
      ? table(
          ['command', 'description'],
          cmd.commands.map((c) => [`[${fullName(c)}](${anchor(c)})${c.name() === fallback ? ' (the default)' : ''}`, prose(help.subcommandDescription(c))]),
        )
      : '',
    added.after && fenced(added.after),
  ];
  return [blocks.filter(Boolean).join('\n\n'), ...cmd.commands.flatMap((c) => commandSection(c, depth + 1))];
}

export function cliReference(program: Command = buildProgram()): string {
  return document([
    generatedBanner(`the commander definitions in ${CLI_SOURCE}`),
    '# The `embers` CLI',
    `Every command, subcommand, argument and option of \`${program.name()}\` (\`npx embers\` in a project that has Embers installed). Every command also takes \`-h, --help\`, which prints what its section here says; a mistake on the command line exits 2 with a hint. Commands that talk to a gateway take \`--url\` and \`--key\`, and fall back on \`EMBERS_URL\` and \`EMBERS_API_KEY\`; the platform's own \`EMBERS_*\` variables are in [configuration.md](configuration.md).`,
    ...commandSection(program, 1).map((section, i) => (i === 0 ? section.replace(/^# .*\n\n/, '') : section)),
  ]);
}
