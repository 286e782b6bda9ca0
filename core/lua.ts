// Every Lua script Embers runs in Redis is a file under core/lua/, named for its module and what
// it does; each file's header says its KEYS and ARGV. A line `-- #include <name>` stands for
// core/lua/<name>.lua (Lua shared by several scripts), and `{{NAME}}` for a value the caller
// gives. Read once, when the module that runs the script loads.
import { readFileSync } from 'node:fs';

/** The text of core/lua/`name`.lua, its includes and values filled in. */
export function lua(name: string, values: Record<string, string | number> = {}): string {
  return read(name)
    .replace(/^-- #include (\S+)$/gm, (_, included: string) => read(included))
    .replace(/\{\{(\w+)\}\}/g, (_, key: string) => {
      if (!(key in values)) throw new Error(`core/lua/${name}.lua needs a value for {{${key}}}`);
      return String(values[key]);
    });
}

function read(name: string): string {
  // Beside this module, or beside the runtime bundle it is built into (scheduler/runtime-build.ts copies them).
  return readFileSync(new URL(`./lua/${name}.lua`, import.meta.url), 'utf8');
}
