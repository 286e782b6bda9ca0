// A usage exporter in a process of its own, for a test that SIGKILLs it part way through an
// export: it exports the records waiting in batches of EXPORT_BATCH, then exits.
import { createLogger } from '../../core/log.ts';
import { createRedis } from '../../core/redis.ts';
import { storeFromConfig } from '../../core/s3.ts';
import { UsageExporter } from '../../scheduler/usage-exporter.ts';

const redis = createRedis(process.env.EMBERS_REDIS_URL!);
const store = storeFromConfig({ EMBERS_S3_ENDPOINT: process.env.EMBERS_S3_ENDPOINT, EMBERS_S3_BUCKET: 'embers' });
const exporter = new UsageExporter({ redis, store, log: createLogger('exporter', 'error'), intervalMs: 60_000, batchRecords: Number(process.env.EXPORT_BATCH) });
while ((await exporter.step()) > 0);
process.exit(0);
