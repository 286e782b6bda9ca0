// Progress for long CLI work: a redrawn bar on a terminal, start/end lines otherwise.
const WIDTH = 24;

export class ProgressBar {
  private last = -1;
  constructor(
    private readonly label: string,
    private total: number,
    private readonly out: NodeJS.WriteStream = process.stderr,
    /** How amounts print: bytes by default, or e.g. `String` for counts. */
    private readonly format: (n: number) => string = formatBytes,
  ) {
    if (!out.isTTY) out.write(total ? `${label} (${format(total)})…\n` : `${label}…\n`);
  }

  /** For work whose size is learnt on the way (a batch counts its lines first). */
  setTotal(total: number): void {
    this.total = total;
  }

  update(done: number): void {
    if (!this.out.isTTY) return;
    const pct = this.total ? Math.min(100, Math.floor((done / this.total) * 100)) : 100;
    if (pct === this.last) return;
    this.last = pct;
    const filled = Math.round((pct / 100) * WIDTH);
    this.out.write(`\r${this.label} ▕${'█'.repeat(filled)}${'░'.repeat(WIDTH - filled)}▏ ${String(pct).padStart(3)}% ${this.format(done)}/${this.format(this.total)}`);
  }

  done(note = 'done'): void {
    if (this.out.isTTY) this.out.write(`\r\x1b[2K${this.label}: ${note}\n`);
    else this.out.write(`${this.label}: ${note}\n`);
  }
}

export function formatBytes(n: number): string {
  if (n < 1024) return `${n} B`;
  if (n < 1024 ** 2) return `${(n / 1024).toFixed(1)} KiB`;
  if (n < 1024 ** 3) return `${(n / 1024 ** 2).toFixed(1)} MiB`;
  return `${(n / 1024 ** 3).toFixed(2)} GiB`;
}
