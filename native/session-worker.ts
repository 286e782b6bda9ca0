// One onnxruntime session on its own thread: session.run() holds the JS thread for the whole
// batch, so it must not run where the replica fetches jobs and answers requests.
import { parentPort, workerData } from 'node:worker_threads';
import ort from 'onnxruntime-node';
import { runSession, sessionOptions } from './ort-session.ts';
import type { SessionInit, WorkerReply, WorkerRequest } from './session.ts';
import { isTyped } from './tensor.ts';

const init = workerData.init as SessionInit;
const port = parentPort!;

async function create(): Promise<{ session: ort.InferenceSession; provider: string; fallback?: string }> {
  try {
    return { session: await ort.InferenceSession.create(init.path, sessionOptions(init.providers, init.threads)), provider: init.providers[0] };
  } catch (err) {
    if (init.providers.length === 1 && init.providers[0] === 'cpu') throw err;
    const session = await ort.InferenceSession.create(init.path, sessionOptions(['cpu'], init.threads));
    return { session, provider: 'cpu', fallback: `${init.providers.join(',')} unavailable (${(err as Error).message.split('\n')[0]}); using cpu` };
  }
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
      const { outputs, inferMs } = await runSession(session, ort.Tensor, msg.feeds);
      const transfer = [...new Set(Object.values(outputs).flatMap((t) => (isTyped(t.data) ? [t.data.buffer as ArrayBuffer] : [])))];
      port.postMessage({ type: 'result', id: msg.id, outputs, inferMs } satisfies WorkerReply, transfer);
    } catch (err) {
      port.postMessage({ type: 'error', id: msg.id, message: (err as Error).message } satisfies WorkerReply);
    }
  });
} catch (err) {
  port.postMessage({ type: 'failed', message: (err as Error).message } satisfies WorkerReply);
}
