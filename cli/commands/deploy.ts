import { Command, InvalidArgumentError } from 'commander';
import { deployFile, deployModelFile } from '../deploy.ts';
import { CliError } from '../errors.ts';
import { clientFrom, printJson, withConnection, withTenant } from './common.ts';

const positiveInt = (what: string, max: number) => (v: string) => {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 1 || n > max) throw new InvalidArgumentError(`${what} must be an integer from 1 to ${max}`);
  return n;
};
const delayMs = (v: string) => {
  const n = Number(v);
  if (!Number.isFinite(n) || n < 0 || n > 10_000) throw new InvalidArgumentError('--max-delay-ms must be a number of ms from 0 to 10000');
  return n;
};

interface DeployOptions {
  url?: string;
  key?: string;
  tenant?: string;
  json?: boolean;
  name?: string;
  maxBatch?: number;
  maxDelayMs?: number;
  /** Commander's negation of --no-activate. */
  activate?: boolean;
}

export function deployCommand(): Command {
  return withTenant(withConnection(
    new Command('deploy')
      .description('deploy function files (bundled, their local models uploaded) or ONNX models as they are (served with dynamic batching, over /v1/run and the Open Inference Protocol); each activates a new version')
      .argument('<files...>', 'function files (each default-exports defineFunction({...})) or .onnx model files')
      .option('--name <name>', 'name of the deployed model (one .onnx file; default: its file name)')
      .option('--max-batch <rows>', 'a model\'s most rows per inference (dynamic batching)', positiveInt('--max-batch', 4096))
      .option('--max-delay-ms <ms>', 'longest a model\'s first call waits for others to batch with', delayMs)
      .option('--no-activate', 'store the new version and leave traffic as it is (roll it out with `embers versions deploy`)')
      .option('--json', 'print the result as JSON')
      .addHelpText('after', '\nExamples:\n  embers deploy functions/ocr/index.ts\n  embers deploy cls.onnx --name cls --max-batch 32 --max-delay-ms 4\n  curl -H "authorization: Bearer $KEY" $URL/v2/models/cls'),
  )).action(async (files: string[], opts: DeployOptions) => {
    const models = files.filter((f) => /\.onnx$/i.test(f));
    if (opts.name !== undefined && (models.length !== 1 || files.length !== 1)) throw new CliError('--name names one deployed model: give exactly one .onnx file with it', 2);
    if ((opts.maxBatch !== undefined || opts.maxDelayMs !== undefined) && models.length !== files.length) throw new CliError('--max-batch and --max-delay-ms apply to .onnx files; a function file sets batching in defineFunction()', 2);
    const client = clientFrom(opts);
    const results = [];
    for (const file of files) {
      const r = /\.onnx$/i.test(file)
        ? await deployModelFile(client, file, { name: opts.name, batching: { maxBatchSize: opts.maxBatch, maxDelayMs: opts.maxDelayMs }, activate: opts.activate })
        : await deployFile(client, file, (line) => process.stderr.write(`${line}\n`), { activate: opts.activate });
      results.push(r);
      if (!opts.json && r.activated === false) process.stdout.write(`${r.unchanged ? 'already stored' : 'stored'} ${r.name} ${r.version}, not active: \`embers versions deploy ${r.name} ${r.version}=10% …\` or \`… ${r.version} --auto\`\n`);
      else if (!opts.json) process.stdout.write(`${r.unchanged ? 'unchanged' : 'deployed'} ${r.name} ${r.version} → POST ${r.endpoint}${/\.onnx$/i.test(file) ? ` and ${r.endpoint.replace(/\/v1\/run\/[^/]+$/, `/v2/models/${r.name}/infer`)}` : ''}\n`);
    }
    if (opts.json) printJson(results);
  });
}
