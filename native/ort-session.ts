// onnxruntime-node sessions as the platform configures them, and one inference with the
// platform's plain tensors: shared by the session worker threads and the inline session on the
// replica's own thread (native/session.ts). Type-only import: the replica's thread loads
// onnxruntime only if it ever makes an inline session.
import type ort from 'onnxruntime-node';
import type { Feeds, TensorData, TensorType } from './tensor.ts';

/**
 * `spinWhileRunning`: the intra-op threads spin between an inference's parallel sections and stop
 * when it returns (session.force_spinning_stop), for a session that only runs alone (the inline
 * one). Otherwise they never spin: spinning threads steal the cores Redis, the gateway and other
 * sessions need, and without the forced stop they spin on after a run.
 */
export function sessionOptions(providers: string[], threads: number, spinWhileRunning = false): ort.InferenceSession.SessionOptions {
  return {
    executionProviders: providers,
    intraOpNumThreads: threads,
    interOpNumThreads: 1,
    graphOptimizationLevel: 'all',
    extra: {
      session: {
        intra_op: { allow_spinning: spinWhileRunning ? '1' : '0' },
        inter_op: { allow_spinning: '0' },
        ...(spinWhileRunning ? { force_spinning_stop: '1' } : {}),
      },
    },
  };
}

/**
 * One inference; `inferMs` covers session.run alone. session.run() holds the calling thread for
 * the whole inference (onnxruntime-node runs it synchronously inside a setImmediate).
 */
export async function runSession(session: ort.InferenceSession, Tensor: typeof ort.Tensor, feeds: Feeds): Promise<{ outputs: Feeds; inferMs: number }> {
  const input: Record<string, ort.Tensor> = {};
  for (const [k, t] of Object.entries(feeds)) {
    // onnxruntime takes byte strings as text.
    input[k] = t.type === 'bytes' ? new Tensor('string', (t.data as Uint8Array[]).map((b) => UTF8.decode(b)), t.dims as number[]) : new Tensor(t.type as ort.Tensor.Type, t.data as ort.Tensor.DataType, t.dims as number[]);
  }
  const t0 = performance.now();
  const res = await session.run(input);
  const inferMs = performance.now() - t0;
  const outputs: Feeds = {};
  for (const [k, t] of Object.entries(res)) outputs[k] = { type: t.type as TensorType, data: t.data as TensorData, dims: [...t.dims] };
  return { outputs, inferMs };
}

const UTF8 = new TextDecoder();
