// GPU discovery through nvidia-smi: the node agent advertises what it finds as capacity.
import { execFile } from 'node:child_process';

export interface GpuInfo {
  index: number;
  name: string;
  memoryMiB: number;
}

/** GPUs on this machine; empty when there is no NVIDIA driver (the CPU-only case). */
export function discoverGpus(timeoutMs = 5_000): Promise<GpuInfo[]> {
  return new Promise((resolve) => {
    execFile('nvidia-smi', ['--query-gpu=index,name,memory.total', '--format=csv,noheader,nounits'], { timeout: timeoutMs }, (err, stdout) => {
      if (err) return resolve([]);
      resolve(parseNvidiaSmi(stdout));
    });
  });
}

export function parseNvidiaSmi(csv: string): GpuInfo[] {
  return csv
    .split('\n')
    .map((line) => line.split(',').map((s) => s.trim()))
    .filter((f) => f.length >= 3 && /^\d+$/.test(f[0]))
    .map(([index, name, mem]) => ({ index: Number(index), name, memoryMiB: Number(mem) }));
}
