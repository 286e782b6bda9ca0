// `embers jobs` — follow and cancel async runs (`embers run --async`).
import { Command } from 'commander';
import type { JobView } from '../../core/jobs.ts';
import { errorMessage, jsonOrText } from '../client.ts';
import { CliError } from '../errors.ts';
import { clientFrom, printJson, withConnection } from './common.ts';
import { saveResult } from './run.ts';

type Conn = { url?: string; key?: string };

export function jobsCommand(): Command {
  const cmd = new Command('jobs').description('async runs: show their status and result, or cancel them');

  withConnection(
    cmd
      .command('show')
      .description("print a job's status, timings and result")
      .argument('<id>')
      .option('-w, --wait', 'wait until it finishes')
      .option('-o, --out <path>', "save a succeeded job's output to this file as a synchronous run answers it (an image's bytes, not their base64), and leave it out of what is printed"),
  ).action(async (id: string, opts: Conn & { wait?: boolean; out?: string }) => {
    const client = clientFrom(opts);
    const route = `/v1/jobs/${encodeURIComponent(id)}`;
    let job = await client.call<JobView>('GET', route);
    while (opts.wait && (job.status === 'queued' || job.status === 'running')) {
      await new Promise((r) => setTimeout(r, 300));
      job = await client.call<JobView>('GET', route);
    }
    if (opts.out !== undefined && job.status === 'succeeded') {
      const res = await client.send('GET', `${route}/output`);
      if (!res.ok) throw new CliError(`GET ${route}/output → ${res.status}: ${errorMessage(jsonOrText(await res.text()))}`);
      await saveResult(opts.out, Buffer.from(await res.arrayBuffer()), res.headers.get('content-type') ?? 'unknown type');
      printJson({ ...job, output: undefined });
      return;
    }
    printJson(job);
    if (opts.wait && job.status !== 'succeeded') throw new CliError(`job ${id} ${job.status}${job.error ? `: ${job.error.message}` : ''}`);
    if (opts.out !== undefined) throw new CliError(`job ${id} is ${job.status}: no output to save yet${job.status === 'queued' || job.status === 'running' ? ' (add --wait)' : ''}`);
  });

  withConnection(cmd.command('cancel').description('cancel a queued job, or ask a running one to stop (its handler sees ctx.signal abort)').argument('<id>')).action(
    async (id: string, opts: Conn) => {
      const job = await clientFrom(opts).call<JobView>('DELETE', `/v1/jobs/${encodeURIComponent(id)}`);
      process.stdout.write(`${job.id} ${job.cancelRequested ? 'cancel requested (running)' : job.status}\n`);
    },
  );
  return cmd;
}
