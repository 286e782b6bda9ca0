// `embers jobs` — follow and cancel async runs (`embers run --async`).
import { Command } from 'commander';
import type { JobView } from '../../core/jobs.ts';
import { CliError } from '../errors.ts';
import { clientFrom, printJson, withConnection } from './common.ts';

type Conn = { url?: string; key?: string };

export function jobsCommand(): Command {
  const cmd = new Command('jobs').description('async runs: show their status and result, or cancel them');

  withConnection(cmd.command('show').description("print a job's status, timings and result").argument('<id>').option('-w, --wait', 'wait until it finishes')).action(
    async (id: string, opts: Conn & { wait?: boolean }) => {
      const client = clientFrom(opts);
      let job = await client.call<JobView>('GET', `/v1/jobs/${encodeURIComponent(id)}`);
      while (opts.wait && (job.status === 'queued' || job.status === 'running')) {
        await new Promise((r) => setTimeout(r, 300));
        job = await client.call<JobView>('GET', `/v1/jobs/${encodeURIComponent(id)}`);
      }
      printJson(job);
      if (opts.wait && job.status !== 'succeeded') throw new CliError(`job ${id} ${job.status}${job.error ? `: ${job.error.message}` : ''}`);
    },
  );

  withConnection(cmd.command('cancel').description('cancel a queued job, or ask a running one to stop (its handler sees ctx.signal abort)').argument('<id>')).action(
    async (id: string, opts: Conn) => {
      const job = await clientFrom(opts).call<JobView>('DELETE', `/v1/jobs/${encodeURIComponent(id)}`);
      process.stdout.write(`${job.id} ${job.cancelRequested ? 'cancel requested (running)' : job.status}\n`);
    },
  );
  return cmd;
}
