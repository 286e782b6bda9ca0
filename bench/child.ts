// Child processes of the benchmark: each in its own process group, so stopping one also ends
// what it started (redis-server, replicas) if it does not stop them itself. Every child is
// killed when this process exits, whatever the reason.
import { spawn, type ChildProcess } from 'node:child_process';
import { createWriteStream, mkdirSync } from 'node:fs';
import path from 'node:path';

const live = new Set<Child>();

process.on('exit', () => {
  for (const c of live) c.killGroup('SIGKILL');
});

export class Child {
  private output = '';
  private readonly exited: Promise<number | null>;
  private exitCode: number | null | undefined;
  private exitSignal: NodeJS.Signals | null = null;

  constructor(
    readonly name: string,
    private readonly proc: ChildProcess,
  ) {
    live.add(this);
    const keep = (chunk: Buffer) => {
      // The tail is enough to explain a failure.
      this.output = (this.output + chunk.toString('utf8')).slice(-20_000);
    };
    proc.stdout?.on('data', keep);
    proc.stderr?.on('data', keep);
    // BENCH_LOG_DIR keeps every child's whole output, for a run that needs explaining.
    const dir = process.env.BENCH_LOG_DIR;
    if (dir) {
      mkdirSync(dir, { recursive: true });
      const file = createWriteStream(path.join(dir, `${name.replace(/\W+/g, '-')}-${proc.pid}.log`));
      proc.stdout?.pipe(file);
      proc.stderr?.pipe(file);
    }
    this.exited = new Promise((resolve) =>
      proc.once('exit', (code, signal) => {
        this.exitCode = code;
        this.exitSignal = signal;
        live.delete(this);
        resolve(code);
      }),
    );
  }

  get pid(): number {
    return this.proc.pid ?? -1;
  }

  get tail(): string {
    return this.output.slice(-3000);
  }

  /** Resolves with the first match of `pattern` in the child's output, or rejects on exit or timeout. */
  async waitFor(pattern: RegExp, timeoutMs: number): Promise<RegExpMatchArray> {
    const end = Date.now() + timeoutMs;
    for (;;) {
      const m = this.output.match(pattern);
      if (m) return m;
      if (this.exitCode !== undefined) throw new Error(`${this.name} exited (${this.exitSignal ? `signal ${this.exitSignal}` : `code ${this.exitCode}`}) before printing ${pattern}:\n${this.tail}`);
      if (Date.now() > end) throw new Error(`${this.name} did not print ${pattern} within ${timeoutMs / 1000} s:\n${this.tail}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  killGroup(signal: NodeJS.Signals): void {
    if (this.exitCode !== undefined || !this.proc.pid) return;
    try {
      process.kill(-this.proc.pid, signal);
    } catch {
      // Already gone.
    }
  }

  /** SIGTERM to the child, SIGKILL to its whole group after graceMs. */
  async stop(graceMs = 15_000): Promise<void> {
    if (this.exitCode !== undefined) return;
    this.proc.kill('SIGTERM');
    const timer = setTimeout(() => this.killGroup('SIGKILL'), graceMs);
    await this.exited;
    clearTimeout(timer);
    // Anything it left behind in its group.
    try {
      process.kill(-this.pid, 'SIGKILL');
    } catch {
      // Nothing left.
    }
  }
}

export function startChild(name: string, args: string[], opts: { cwd: string; env: NodeJS.ProcessEnv }): Child {
  const proc = spawn(process.execPath, args, { cwd: opts.cwd, env: opts.env, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
  return new Child(name, proc);
}

export async function stopAllChildren(): Promise<void> {
  await Promise.all([...live].map((c) => c.stop()));
}
