// The embedded S3-compatible server (s3rver) for `embers dev` and the tests: loopback only.
import { mkdir } from 'node:fs/promises';
import S3rver from 's3rver';

export interface LocalS3 {
  endpoint: string;
  stop(): Promise<void>;
}

export async function startLocalS3(dir: string, port = 0): Promise<LocalS3> {
  await mkdir(dir, { recursive: true });
  const server = new S3rver({ address: '127.0.0.1', port, silent: true, directory: dir });
  const addr = await server.run();
  return {
    endpoint: `http://127.0.0.1:${addr.port}`,
    async stop() {
      await server.close();
    },
  };
}
