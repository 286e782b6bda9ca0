import { Command } from 'commander';
import { uploadModel } from '../deploy.ts';
import { clientFrom, withConnection } from './common.ts';

export function modelsCommand(): Command {
  const cmd = new Command('models').description('manage model files in Embers\' S3 store');
  withConnection(cmd.command('upload').description('upload a local .onnx file (by content hash) and print its s3:// URI').argument('<file>')).action(
    async (file: string, opts: { url?: string; key?: string }) => {
      process.stdout.write(`${await uploadModel(clientFrom(opts), file)}\n`);
    },
  );
  return cmd;
}
