// The printed report: tables and the ratios against their targets.
import os from 'node:os';
import { coldSummaryLine, formatCold } from './cold.ts';
import { batchingSummaryLine } from './batching.ts';
import { cpuByRole, errorsNote, num, table } from './format.ts';
import { cpuPerRequestUs, echoVsPingByCpu, TARGETS, type BenchResult, type Measured } from './result.ts';
import { BLOCK } from './paired.ts';
import { settingLabel } from './ort.ts';

/** Cores busy across every role measured. */
const totalCores = (cores: Record<string, number>): number => Object.values(cores).reduce((a, b) => a + b, 0);

export function formatReport(r: BenchResult): string {
  const out: string[] = [];
  const m = r.machine;
  out.push(`Embers benchmark — ${r.date} — ${m.cpuModel}, ${m.cores} cores, node ${m.node}, onnxruntime-node ${m.ortVersion}, ${r.git.commit.slice(0, 7)}${r.git.dirtyFiles ? ` (+${r.git.dirtyFiles} changed files)` : ''}`);
  out.push(`Load average at start: ${m.loadAvgAtStart.join(', ')} (other work on the machine skews every figure).`);
  out.push(
    `Each point: ≥${r.window.warmupSeconds} s warm-up (until every worker has an answer), ${r.window.measureSeconds} s measured; where two targets take turns (a, b, b, a), each turn has its own warm-up and ${r.window.measureSeconds / 2} s measured.`,
  );

  out.push('', 'Raw limit, cls model alone (x [N,3,48,192]), items/s (p50 ms per batch):');
  const batches = [...new Set(r.raw.cls.map((p) => p.batch))];
  const settings = [...new Set(r.raw.cls.map((p) => settingLabel(p)))];
  out.push(
    table(
      ['batch', ...settings],
      batches.map((b) => [
        String(b),
        ...settings.map((label) => {
          const p = r.raw.cls.find((x) => x.batch === b && settingLabel(x) === label);
          return p ? `${num(p.itemsPerSec, 0)} (${num(p.p50BatchMs, 2)})` : '-';
        }),
      ]),
    ),
  );
  out.push(`best: ${num(r.raw.clsBest.itemsPerSec, 0)} items/s at batch ${r.raw.clsBest.batch}, ${settingLabel(r.raw.clsBest)}`);
  const rp = r.raw.pipeline;
  out.push(
    '',
    `Raw limit, ocr handler in-process on direct ORT sessions at its fastest thread setting (${settingLabel(rp)}), sequential: ${num(rp.reqPerSec, 2)} req/s, p50 ${num(rp.latencyMs.p50, 1)} ms, p99 ${num(rp.latencyMs.p99, 1)} ms (${rp.requests} requests)`,
    ...(r.raw.otherPipelines ?? []).map((o) => `  (${settingLabel(o)}: ${num(o.reqPerSec, 2)} req/s, p50 ${num(o.latencyMs.p50, 1)} ms)`),
  );
  out.push(`Test image ${r.image.width}×${r.image.height} PNG (${r.image.base64Bytes} B base64) "${r.image.text}" → raw "${r.outputs.raw}", Embers "${r.outputs.embers}", naive "${r.outputs.naive}"${r.outputs.match ? '' : '  ! OUTPUTS DIFFER'}`);
  out.push(`Embers (embers dev) up with ready ocr and echo replicas in ${num(r.embersStartupSeconds, 1)} s`);

  const naiveThreads = typeof r.naive?.intraOpThreads === 'number' ? `: ${r.naive.intraOpThreads} intra-op thread(s) per session here` : '';
  out.push('', `OCR over HTTP: Embers POST /v1/run/ocr vs naive POST /ocr (onnxruntime default session options${naiveThreads}), taking turns Embers, naive, naive, Embers (half the window each, pooled); latency ms (client side); batch = Δinferences/Δexecutions det/rec`);
  out.push(
    table(
      ['conc', 'Embers req/s', 'p50', 'p90', 'p99', 'naive req/s', 'p50', 'p90', 'p99', 'Embers÷naive', 'batch det/rec', 'replicas'],
      r.ocr.map((p) => [
        String(p.concurrency),
        num(p.embers.reqPerSec, 2),
        num(p.embers.latencyMs.p50),
        num(p.embers.latencyMs.p90),
        num(p.embers.latencyMs.p99),
        num(p.naive.reqPerSec, 2),
        num(p.naive.latencyMs.p50),
        num(p.naive.latencyMs.p90),
        num(p.naive.latencyMs.p99),
        num(p.ratio, 2),
        `${num(p.embers.batch.det?.meanBatch, 2)}/${num(p.embers.batch.rec?.meanBatch, 2)}`,
        String(p.embers.replicas),
      ]),
    ),
  );
  const c1 = r.ocr.find((p) => p.concurrency === 1);
  if (c1) {
    const side = (m: string) => {
      const b = c1.embers.batch[m];
      if (!b) return `${m} -`;
      const l = b.lone;
      return `${m} ${b.wide} of ${b.executions} on every core${l ? ` (chooser: ${l.choice === 'wide' ? 'every core' : 'narrow'}; medians ${num(l.wide ?? Number.NaN, 1)} every core, ${num(l.narrow ?? Number.NaN, 1)} narrow, ms per million input values)` : ''}`;
    };
    out.push(`Lone inferences at c = 1 (every core or a narrow session, as each model measured cheaper): ${side('det')}; ${side('rec')}`);
  }
  out.push(
    '',
    'Embers server side (Server-Timing means, ms), in Triton\'s terms: queue | compute input (request taken → first model call) | batch wait (model calls waiting for their batch to start, or behind a busy model) | compute infer (how long the runs it rode in took) | between = handler − input − batch − infer − output (work between model calls, waits for the replica\'s thread, tensor hand-offs; calls in parallel count each) | compute output (last call answered → serialised result) | gateway+transport = total − queue − handler | client − total',
  );
  out.push(
    table(
      ['conc', 'queue', 'input', 'batch', 'infer', 'between', 'output', 'gw+transport', 'client−total', 'handler', 'total'],
      r.ocr.map((p) => {
        const t = p.embers.serverTiming ?? {};
        return [
          String(p.concurrency),
          num(t.queue),
          num(t.input),
          num(t.batch),
          num(t.infer),
          num(t.handler - t.input - t.batch - t.infer - t.output),
          num(t.output),
          num(t.total - t.queue - t.handler),
          num(p.embers.latencyMs.mean - t.total),
          num(t.handler),
          num(t.total),
        ];
      }),
    ),
  );
  for (const p of r.ocr) out.push(...errorsNote('Embers ocr', p.embers), ...errorsNote('naive ocr', p.naive));

  out.push(...formatOverhead(r.overhead));
  const { echo, ping } = r.overhead;

  const roles = ['gateway+agent', 'redis', 'replicas', 'naive', 'loadgen', 'other'];
  const cpuRow = (name: string, p: Measured) => [name, String(p.concurrency), ...roles.map((k) => num(p.cores[k], 2))];
  out.push('', `CPU during each point (cores busy, warm-up and drain included; ${r.machine.cores} = the whole machine):`);
  out.push(
    table(
      ['server', 'conc', ...roles],
      [
        ...r.ocr.flatMap((p) => [cpuRow('Embers ocr', p.embers), cpuRow('naive ocr', p.naive)]),
        cpuRow('raw ocr (loadgen)', r.saturation.raw),
        cpuRow('Embers ocr, turns', r.saturation.embers),
        cpuRow('Embers echo', echo),
        cpuRow('naive ping', ping),
      ],
    ),
  );

  if (r.coldStart) out.push('', formatCold(r.coldStart));
  if (r.coldStartError) out.push('', `Cold start section failed: ${r.coldStartError}`);

  const verdict = (ok: boolean | undefined) => (ok ? 'PASS' : 'MISS');
  const target = (name: keyof typeof TARGETS) => `target ${TARGETS[name].op === '>=' ? '≥' : '≤'} ${TARGETS[name].value.toFixed(2)}`;
  const { ratios, pass } = r;
  // Each target's runs in the order they ran (a, b, b, a): how far the machine moved meanwhile.
  const turns = (a: Measured, b: Measured) =>
    a.runsReqPerSec && b.runsReqPerSec ? `   (req/s by turn: ${num(a.runsReqPerSec[0], 1)}, ${num(b.runsReqPerSec[0], 1)}, ${num(b.runsReqPerSec[1], 1)}, ${num(a.runsReqPerSec[1], 1)})` : '';
  const best = r.ocr.reduce((a, b) => (b.embers.reqPerSec > a.embers.reqPerSec ? b : a));
  out.push('', 'Summary:');
  const sat = r.saturation;
  out.push(
    `  embers_vs_raw        ${num(ratios.embers_vs_raw, 3).padStart(7)}  ${target('embers_vs_raw')}  ${verdict(pass.embers_vs_raw)}   (taking turns: raw ${settingLabel(sat.setting)} ${num(sat.raw.reqPerSec, 2)} req/s on ${num(totalCores(sat.raw.cores), 2)} cores, Embers at c=${sat.concurrency} ${num(sat.embers.reqPerSec, 2)} req/s on ${num(totalCores(sat.embers.cores), 2)})${turns(sat.raw, sat.embers)}`,
    `  embers_vs_raw_sweep  ${num(ratios.embers_vs_raw_sweep, 3).padStart(7)}  (no target: the sweep's best, ${num(best.embers.reqPerSec, 2)} req/s at c=${best.concurrency}, ÷ raw ${num(rp.reqPerSec, 2)} req/s measured minutes earlier)`,
  );
  for (const [c, v] of Object.entries(ratios.embers_vs_naive)) {
    const p = r.ocr.find((x) => `c${x.concurrency}` === c);
    out.push(`  embers_vs_naive.${c.padEnd(4)} ${num(v, 3).padStart(7)}  ${target('embers_vs_naive')}  ${verdict(pass[`embers_vs_naive.${c}`])}${p ? turns(p.embers, p.naive) : ''}`);
  }
  const pr = r.pairedC1;
  out.push(
    `  added_p50_ms_at_c1   ${num(ratios.added_p50_ms_at_c1, 2).padStart(7)}  ${target('added_p50_ms_at_c1')}  ${verdict(pass.added_p50_ms_at_c1)}   (${pr.blocks} blocks each of ${BLOCK} back-to-back requests, taking turns: raw p50 ${num(pr.rawP50Ms)} → Embers p50 ${num(pr.embersP50Ms)} ms; median block difference ${num(pr.blockDiffP50Ms, 2)} ms, quartiles ${num(pr.blockDiffQuartilesMs[0], 2)} to ${num(pr.blockDiffQuartilesMs[1], 2)}; outside the handler ${num(pr.outsideHandlerMs, 2)} ms${pr.errors ? `; ${pr.errors} Embers errors` : ''})`,
  );
  if (pr.plain) {
    const pl = pr.plain;
    out.push(
      pl.blocks
        ? `  floor: a plain Hono server running the same handler with raw's session settings, taking the same turns (${pl.blocks} blocks): outside its handler ${num(pl.outsideHandlerMs, 2)} ms (Embers ${num(pr.outsideHandlerMs, 2)}: its queue path adds ${num(pr.outsideHandlerMs - pl.outsideHandlerMs, 2)}); p50 ${num(pl.p50Ms)} ms, ${num(pl.addedP50Ms, 2)} over raw (block differences: median ${num(pl.blockDiffP50Ms, 2)}, quartiles ${num(pl.blockDiffQuartilesMs[0], 2)} to ${num(pl.blockDiffQuartilesMs[1], 2)})${pl.errors ? `; ${pl.errors} errors` : ''}`
        : `  floor: the plain Hono server answered nothing (${pl.errors} errors: ${pl.firstError ?? 'no answer'})`,
    );
  }
  out.push(`  echo_vs_ping         ${num(ratios.echo_vs_ping, 3).padStart(7)}  ${target('echo_vs_ping')}  ${verdict(pass.echo_vs_ping)}${turns(echo, ping)}`);
  if (ratios.cpu_us_per_echo !== undefined) out.push(`  cpu_us_per_echo      ${num(ratios.cpu_us_per_echo, 0).padStart(7)}  ${target('cpu_us_per_echo')}  ${verdict(pass.cpu_us_per_echo)}   (every process, load generator included)`);
  if (ratios.echo_vs_ping_by_cpu !== undefined) out.push(`  echo_vs_ping_by_cpu  ${num(ratios.echo_vs_ping_by_cpu, 3).padStart(7)}  (no target: ping's CPU per request ÷ echo's, every process counted)`);
  if (r.batching) out.push(batchingSummaryLine(r.batching));
  if (r.batchingError) out.push(`  dynamic batching section failed: ${r.batchingError}`);
  if (r.coldStart) out.push(coldSummaryLine(r.coldStart));
  out.push(`Took ${num(r.durationSeconds, 0)} s.`);
  return out.join('\n');
}

/** The `echo` against ping section's lines. */
export function formatOverhead(o: BenchResult['overhead']): string[] {
  const out: string[] = [];
  const { echo, ping, concurrency } = o;
  const et = echo.serverTiming ?? {};
  out.push('', `Overhead at concurrency ${concurrency}: Embers POST /v1/run/echo vs naive GET /ping, taking turns echo, ping, ping, echo`);
  out.push(
    table(
      ['endpoint', 'req/s', 'p50', 'p90', 'p99', 'server-side means (ms)'],
      [
        ['echo', num(echo.reqPerSec, 0), num(echo.latencyMs.p50, 2), num(echo.latencyMs.p90, 2), num(echo.latencyMs.p99, 2), `queue ${num(et.queue, 2)}, handler ${num(et.handler, 2)}, total ${num(et.total, 2)}`],
        ['ping', num(ping.reqPerSec, 0), num(ping.latencyMs.p50, 2), num(ping.latencyMs.p90, 2), num(ping.latencyMs.p99, 2), '-'],
      ],
    ),
  );
  out.push(...errorsNote('echo', echo), ...errorsNote('ping', ping));
  const byCpu = echoVsPingByCpu(echo, ping).echo_vs_ping_by_cpu;
  if (byCpu !== undefined) {
    out.push(
      `CPU per request (µs, cores busy ÷ req/s): echo ${cpuByRole(echo)} = ${num(cpuPerRequestUs(echo), 0)}; ping ${cpuByRole(ping)} = ${num(cpuPerRequestUs(ping), 0)}`,
      `  ping ÷ echo by CPU: ${num(byCpu, 3)} (what echo ÷ ping would be with both sides keeping the machine equally busy)`,
    );
  }
  const { sweep, bestEchoVsBestPing } = o;
  if (sweep?.length) {
    out.push('', `echo and ping by concurrency, taking turns at each (cores: all processes measured, busy; ${os.cpus().length} = the whole machine):`);
    out.push(
      table(
        ['conc', 'echo req/s', 'p50', 'cores', 'ping req/s', 'p50', 'cores', 'echo÷ping'],
        sweep.map((x) => [String(x.concurrency), num(x.echoReqPerSec, 0), num(x.echoP50Ms, 2), num(totalCores(x.echoCores), 2), num(x.pingReqPerSec, 0), num(x.pingP50Ms, 2), num(totalCores(x.pingCores), 2), num(x.echoVsPing, 3)]),
      ),
    );
    if (bestEchoVsBestPing !== undefined) out.push(`  best echo ÷ best ping, each at its own concurrency: ${num(bestEchoVsBestPing, 3)} (informative; the target is at c = ${concurrency})`);
  }
  return out;
}
