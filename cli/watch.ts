// `embers dev --watch`: redeploys a function when its file, or a file of its own project that it
// imports, changes. Each redeploy is a new version: the platform drains the old version's
// replicas, so requests in flight finish on it.
import { watch, type FSWatcher } from 'node:fs';
import path from 'node:path';

/** Quiet time after the last change before redeploying: editors write a file in several steps. */
const SETTLE_MS = 150;

export interface Deployed {
  name: string;
  version: string;
  unchanged: boolean;
  inputs?: string[];
}

/** Which function files import `changed`, from each one's last bundle inputs. Pure. */
export function affected(inputs: ReadonlyMap<string, readonly string[]>, changed: string): string[] {
  return [...inputs].filter(([file, files]) => file === changed || files.includes(changed)).map(([file]) => file);
}

export class FunctionWatcher {
  private readonly inputs = new Map<string, string[]>();
  private readonly watchers = new Map<string, FSWatcher>();
  private readonly dirty = new Set<string>();
  private timer: NodeJS.Timeout | undefined;
  private deploying: Promise<void> = Promise.resolve();

  constructor(
    private readonly o: {
      deploy: (file: string) => Promise<Deployed>;
      log: (msg: string, err?: Error) => void;
    },
  ) {}

  /** Starts watching what `file`'s last deploy bundled. */
  add(file: string, deployed: Deployed): void {
    this.inputs.set(file, deployed.inputs?.length ? deployed.inputs : [file]);
    this.rewatch();
  }

  close(): void {
    clearTimeout(this.timer);
    for (const w of this.watchers.values()) w.close();
    this.watchers.clear();
  }

  /** One watcher per folder: an editor that saves by renaming a new file over the old keeps it. */
  private rewatch(): void {
    const dirs = new Set([...this.inputs.values()].flat().map((f) => path.dirname(f)));
    for (const [dir, w] of this.watchers) if (!dirs.has(dir)) (w.close(), this.watchers.delete(dir));
    for (const dir of dirs) {
      if (this.watchers.has(dir)) continue;
      try {
        const w = watch(dir, (_, name) => name && this.changed(path.join(dir, name.toString())));
        w.on('error', (err) => this.o.log(`stopped watching ${dir}`, err));
        this.watchers.set(dir, w);
      } catch (err) {
        this.o.log(`cannot watch ${dir}`, err as Error);
      }
    }
  }

  private changed(file: string): void {
    const fns = affected(this.inputs, file);
    if (!fns.length) return;
    for (const f of fns) this.dirty.add(f);
    clearTimeout(this.timer);
    this.timer = setTimeout(() => void this.redeploy(), SETTLE_MS);
  }

  /** Redeploys the changed functions one at a time, after any redeploy under way. */
  private redeploy(): Promise<void> {
    this.deploying = this.deploying.then(async () => {
      const files = [...this.dirty];
      this.dirty.clear();
      for (const file of files) {
        try {
          const r = await this.o.deploy(file);
          this.add(file, r);
          this.o.log(r.unchanged ? `${r.name}: unchanged (${r.version})` : `${r.name}: deployed ${r.version}`);
        } catch (err) {
          this.o.log(`could not redeploy ${path.relative(process.cwd(), file)}; the active version keeps serving`, err as Error);
        }
      }
    });
    return this.deploying;
  }
}
