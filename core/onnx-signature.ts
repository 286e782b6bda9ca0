// A model's graph inputs and outputs (names, element types, shapes) read from its ONNX file
// without loading it: a walk over the protobuf that skips the weights, so a deploy of a large
// model reads a few KiB of it. What a bare model's Open Inference Protocol metadata comes from.
import { open, type FileHandle } from 'node:fs/promises';
import { ONNX_ELEMENT_TYPE, type TensorSignature, type TensorSpec } from './oip/datatypes.ts';

/** A file that is not an ONNX model, or one whose graph takes or gives something other than tensors. */
export class OnnxSignatureError extends Error {
  override name = 'OnnxSignatureError';
}

const WINDOW = 64 * 1024;
/** A ValueInfoProto (a name and a type) is small; a larger one means the file is not what it claims. */
const MAX_VALUE_INFO = 1024 * 1024;

/** Sequential reads over a file, through a window, with skips that read nothing. */
class FileReader {
  pos = 0;
  private buf = Buffer.alloc(0);
  private bufAt = 0;
  constructor(private readonly fh: FileHandle, readonly size: number) {}

  private async fill(n: number): Promise<void> {
    if (this.pos >= this.bufAt && this.pos + n <= this.bufAt + this.buf.length) return;
    const len = Math.min(Math.max(n, WINDOW), this.size - this.pos);
    if (len < n) throw new OnnxSignatureError('the file ends inside a field: it is truncated or not an ONNX model');
    const buf = Buffer.allocUnsafe(len);
    const { bytesRead } = await this.fh.read(buf, 0, len, this.pos);
    this.buf = buf.subarray(0, bytesRead);
    this.bufAt = this.pos;
    if (bytesRead < n) throw new OnnxSignatureError('the file ends inside a field: it is truncated or not an ONNX model');
  }

  async varint(): Promise<number> {
    await this.fill(Math.min(10, this.size - this.pos));
    const at = this.pos - this.bufAt;
    const { value, length } = decodeVarint(this.buf, at);
    this.pos += length;
    return value;
  }

  async bytes(n: number): Promise<Buffer> {
    await this.fill(n);
    const at = this.pos - this.bufAt;
    this.pos += n;
    return this.buf.subarray(at, at + n);
  }

  skip(n: number): void {
    this.pos += n;
    if (this.pos > this.size) throw new OnnxSignatureError('a field runs past the end of the file: it is truncated or not an ONNX model');
  }
}

/** A varint at `at`; values past 2^53 (negative int64s) come back as -1. */
function decodeVarint(buf: Buffer, at: number): { value: number; length: number } {
  let value = 0;
  let scale = 1;
  for (let i = 0; i < 10; i++) {
    if (at + i >= buf.length) break;
    const b = buf[at + i];
    value += (b & 0x7f) * scale;
    scale *= 128;
    if (b < 0x80) return { value: value > Number.MAX_SAFE_INTEGER ? -1 : value, length: i + 1 };
  }
  throw new OnnxSignatureError('a malformed varint: the file is not an ONNX model');
}

/** Skips a field's value by its wire type. */
async function skipValue(r: FileReader, wire: number): Promise<void> {
  if (wire === 0) await r.varint();
  else if (wire === 1) r.skip(8);
  else if (wire === 2) r.skip(await r.varint());
  else if (wire === 5) r.skip(4);
  else throw new OnnxSignatureError(`protobuf wire type ${wire} where an ONNX model has none: the file is not an ONNX model`);
}

/** Calls `on` for each field of the message that ends at `end`; `on` reads the value or returns false to skip it. */
async function fields(r: FileReader, end: number, on: (field: number, wire: number) => Promise<boolean>): Promise<void> {
  while (r.pos < end) {
    const tag = await r.varint();
    const field = Math.floor(tag / 8);
    const wire = tag & 7;
    if (field === 0) throw new OnnxSignatureError('a field numbered 0: the file is not an ONNX model');
    if (!(await on(field, wire))) await skipValue(r, wire);
  }
  if (r.pos !== end) throw new OnnxSignatureError('a field runs past the end of its message: the file is not an ONNX model');
}

/** The same walk over a message held in memory. */
function memoryFields(buf: Buffer, on: (field: number, wire: number, value: number | Buffer) => void): void {
  let at = 0;
  while (at < buf.length) {
    const tag = decodeVarint(buf, at);
    at += tag.length;
    const field = Math.floor(tag.value / 8);
    const wire = tag.value & 7;
    if (wire === 0) {
      const v = decodeVarint(buf, at);
      at += v.length;
      on(field, wire, v.value);
    } else if (wire === 2) {
      const len = decodeVarint(buf, at);
      at += len.length;
      if (at + len.value > buf.length) throw new OnnxSignatureError('a field runs past the end of its message: the file is not an ONNX model');
      on(field, wire, buf.subarray(at, at + len.value));
      at += len.value;
    } else if (wire === 1 || wire === 5) at += wire === 1 ? 8 : 4;
    else throw new OnnxSignatureError(`protobuf wire type ${wire} where an ONNX model has none: the file is not an ONNX model`);
  }
}

/** A ValueInfoProto: name (1) and TypeProto (2) → tensor_type (1) → elem_type (1), shape (2) → dim (1) → dim_value (1) | dim_param (2). */
function valueInfo(buf: Buffer): TensorSpec {
  let name = '';
  let elemType = 0;
  let shape: number[] | undefined;
  let kind = 'tensor';
  memoryFields(buf, (f, w, v) => {
    if (f === 1 && w === 2) name = (v as Buffer).toString('utf8');
    else if (f === 2 && w === 2) {
      memoryFields(v as Buffer, (tf, tw, tv) => {
        if (tf !== 1) kind = ({ 4: 'sequence', 5: 'map', 8: 'sparse tensor', 9: 'optional' } as Record<number, string>)[tf] ?? kind;
        if (tf !== 1 || tw !== 2) return;
        memoryFields(tv as Buffer, (ef, ew, ev) => {
          if (ef === 1 && ew === 0) elemType = ev as number;
          if (ef !== 2 || ew !== 2) return;
          shape = [];
          memoryFields(ev as Buffer, (sf, sw, sv) => {
            if (sf !== 1 || sw !== 2) return;
            let dim = -1;
            memoryFields(sv as Buffer, (df, dw, dv) => {
              if (df === 1 && dw === 0) dim = dv as number;
            });
            shape!.push(dim);
          });
        });
      });
    }
  });
  if (kind !== 'tensor') throw new OnnxSignatureError(`"${name}" is a ${kind}, not a tensor: only models whose inputs and outputs are tensors can be served bare`);
  const datatype = ONNX_ELEMENT_TYPE[elemType];
  if (!datatype) throw new OnnxSignatureError(`"${name}" has ONNX element type ${elemType}, which onnxruntime-node cannot feed (bfloat16, complex and 8-bit floats are not supported)`);
  // No shape at all: any rank. The protocol has no word for that; one dimension of any size says least.
  return { name, datatype, shape: shape ?? [-1] };
}

/** The graph's inputs (less those that are initializers: weights an old exporter listed as inputs) and outputs. */
export async function readOnnxSignature(file: string): Promise<TensorSignature> {
  const fh = await open(file, 'r');
  try {
    const r = new FileReader(fh, (await fh.stat()).size);
    const inputs: TensorSpec[] = [];
    const outputs: TensorSpec[] = [];
    const initializers = new Set<string>();
    let sawGraph = false;
    const readValueInfo = async () => {
      const len = await r.varint();
      if (len > MAX_VALUE_INFO) throw new OnnxSignatureError('a graph input or output of over 1 MiB: the file is not an ONNX model');
      return valueInfo(await r.bytes(len));
    };
    await fields(r, r.size, async (field, wire) => {
      if (field !== 7 || wire !== 2) return false;
      sawGraph = true;
      const end = (await r.varint()) + r.pos;
      await fields(r, end, async (gf, gw) => {
        if (gw !== 2) return false;
        if (gf === 11) inputs.push(await readValueInfo());
        else if (gf === 12) outputs.push(await readValueInfo());
        else if (gf === 5) {
          const tEnd = (await r.varint()) + r.pos;
          await fields(r, tEnd, async (tf, tw) => {
            if (tf !== 8 || tw !== 2) return false;
            initializers.add((await r.bytes(await r.varint())).toString('utf8'));
            return true;
          });
        } else return false;
        return true;
      });
      return true;
    });
    if (!sawGraph) throw new OnnxSignatureError('no graph in the file: it is not an ONNX model');
    const feeds = inputs.filter((i) => !initializers.has(i.name));
    if (!feeds.length) throw new OnnxSignatureError('the graph takes no inputs');
    return { inputs: feeds, outputs };
  } finally {
    await fh.close();
  }
}
