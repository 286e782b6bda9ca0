// `embers buckets` — register a bucket of your own (its S3 credentials), so batch inputs and
// deploy models can name objects there; list and remove registrations. The secret is read from
// AWS_SECRET_ACCESS_KEY or stdin, never from the command line (where `ps` would show it).
import { Command } from 'commander';
import type { BucketView } from '../../core/buckets.ts';
import { CliError } from '../errors.ts';
import { clientFrom, notACommand, printJson, table, withConnection, withTenant } from './common.ts';

type Conn = { url?: string; key?: string; tenant?: string };

export function bucketsCommand(): Command {
  const cmd = new Command('buckets').description('buckets of your own (S3 or S3-compatible) that batch inputs and deploy models may name');

  withTenant(withConnection(cmd.command('list', { isDefault: true }).description('list your registered buckets').argument('[unknown...]').option('--json', 'print JSON'))).action(
    async (unknown: string[], opts: Conn & { json?: boolean }) => {
      notACommand(cmd, unknown);
      const { data } = await clientFrom(opts).call<{ data: BucketView[] }>('GET', '/v1/buckets');
      if (opts.json) return printJson(data);
      if (data.length === 0) return void process.stdout.write('no buckets registered: `embers buckets add <bucket> --help`\n');
      table(['BUCKET', 'ENDPOINT', 'REGION', 'KEY ID', 'REGISTERED'], data.map((b) => [b.bucket, b.endpoint ?? '(AWS S3)', b.region, b.accessKeyId, b.createdAt]));
    },
  );

  withTenant(
    withConnection(
      cmd
        .command('add')
        .description('register a bucket with credentials that can read it (s3:ListBucket, s3:GetObject); Embers checks them first')
        .argument('<bucket>', 'the bucket name')
        .option('--endpoint <url>', 'an S3-compatible server (https://…); omit for AWS S3')
        .option('--region <region>', 'its region', 'us-east-1')
        .option('--access-key-id <id>', 'the access key id (default: $AWS_ACCESS_KEY_ID)')
        .option('--secret-stdin', 'read the secret access key from stdin (default: $AWS_SECRET_ACCESS_KEY)')
        .option('--json', 'print the registration as JSON'),
    ),
  ).action(async (bucket: string, opts: Conn & { endpoint?: string; region: string; accessKeyId?: string; secretStdin?: boolean; json?: boolean }) => {
    const accessKeyId = opts.accessKeyId ?? process.env.AWS_ACCESS_KEY_ID;
    if (!accessKeyId) throw new CliError('no access key id: pass --access-key-id or set AWS_ACCESS_KEY_ID', 2);
    const secretAccessKey = opts.secretStdin ? (await readStdin()).trim() : process.env.AWS_SECRET_ACCESS_KEY;
    if (!secretAccessKey) throw new CliError(opts.secretStdin ? 'stdin held no secret access key' : 'no secret access key: set AWS_SECRET_ACCESS_KEY or pipe it in with --secret-stdin', 2);
    const body = { bucket, accessKeyId, secretAccessKey, region: opts.region, ...(opts.endpoint ? { endpoint: opts.endpoint } : {}) };
    const view = await clientFrom(opts).call<BucketView>('POST', '/v1/buckets', body);
    if (opts.json) return printJson(view);
    process.stdout.write(`registered ${view.bucket}: batch inputs and models may now name s3://${view.bucket}/…\n`);
  });

  withTenant(withConnection(cmd.command('remove').description('forget a bucket (batches and replicas reading it then fail)').argument('<bucket>'))).action(async (bucket: string, opts: Conn) => {
    await clientFrom(opts).call('DELETE', `/v1/buckets/${encodeURIComponent(bucket)}`);
    process.stdout.write(`removed ${bucket}\n`);
  });
  return cmd;
}

async function readStdin(): Promise<string> {
  if (process.stdin.isTTY) process.stderr.write('secret access key (then Enter, Ctrl-D): ');
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}
