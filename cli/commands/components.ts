// `embers gateway` and `embers agent`: the platform's parts as separate processes, for running
// across machines (infra/README.md says how). Both need Redis (EMBERS_REDIS_URL, or
// EMBERS_REDIS_SENTINELS), and S3 (EMBERS_S3_ENDPOINT, or AWS S3 with the standard AWS credentials).
// What they run loads when they run (components-run.ts): every other command starts without it.
import { Command } from 'commander';

export function gatewayCommand(): Command {
  return new Command('gateway').description('run a gateway only (stateless; run as many as you like behind a load balancer)').action(async () => {
    await (await import('./components-run.ts')).runGateway();
  });
}

export function agentCommand(): Command {
  return new Command('agent')
    .description("run a node agent: this machine's replicas (and a scheduler candidate); one per machine")
    .action(async () => {
      await (await import('./components-run.ts')).runAgent();
    });
}
