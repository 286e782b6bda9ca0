// One onnxruntime session on its own thread: session.run() holds the JS thread for the whole
// batch, so it must not run where the replica fetches jobs and answers requests.
import { parentPort, workerData } from 'node:worker_threads';
import ort from 'onnxruntime-node';
import type { Feeds, TensorData, TensorType } from './tensor.ts';
import type { SessionInit, WorkerReply, WorkerRequest } from './session.ts';

const init = workerData.init as SessionInit;
const port = parentPort!;

async function create(): Promise<{ session: ort.InferenceSession; provider: string; fallback?: string }> {
  const options = (providers: string[]): ort.InferenceSession.SessionOptions => ({
    executionProviders: providers,
    intraOpNumThreads: init.threads,
    interOpNumThreads: 1,
    graphOptimizationLevel: 'all',
    // Spinning threads steal the cores Redis and the gateway need (BASELINE.md pitfall 5).
    extra: { session: { intra_op: { allow_spinning: '0' }, inter_op: { allow_spinning: '0' } } },
  });
  try {
    return { session: await ort.InferenceSession.create(init.path, options(init.providers)), provider: init.providers[0] };
  } catch (err) {
    if (init.providers.length === 1 && init.providers[0] === 'cpu') throw err;
    const session = await ort.InferenceSession.create(init.path, options(['cpu']));
    return { session, provider: 'cpu', fallback: `${init.providers.join(',')} unavailable (${(err as Error).message.split('\n')[0]}); using cpu` };
  }
}

function toOrt(feeds: Feeds): Record<string, ort.Tensor> {
  const out: Record<string, ort.Tensor> = {};
  for (const [k, t] of Object.entries(feeds)) out[k] = new ort.Tensor(t.type as ort.Tensor.Type, t.data as ort.Tensor.DataType, t.dims as number[]);
  return out;
}

try {
  const { session, provider, fallback } = await create();
  const ready: WorkerReply = {
    type: 'ready',
    inputNames: [...session.inputNames],
    outputNames: [...session.outputNames],
    provider,
    fallback,
  };
  port.postMessage(ready);
  port.on('message', async (msg: WorkerRequest) => {
    try {
      const t0 = performance.now();
      const res = await session.run(toOrt(msg.feeds));
      const inferMs = performance.now() - t0;
      const outputs: Feeds = {};
      const transfer: ArrayBuffer[] = [];
      for (const [k, t] of Object.entries(res)) {
        const data = t.data as TensorData;
        outputs[k] = { type: t.type as TensorType, data, dims: [...t.dims] };
        transfer.push(data.buffer as ArrayBuffer);
      }
      port.postMessage({ type: 'result', id: msg.id, outputs, inferMs } satisfies WorkerReply, transfer);
    } catch (err) {
      port.postMessage({ type: 'error', id: msg.id, message: (err as Error).message } satisfies WorkerReply);
    }
  });
} catch (err) {
  port.postMessage({ type: 'failed', message: (err as Error).message } satisfies WorkerReply);
}
