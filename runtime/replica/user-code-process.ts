// The replica's side of its user-code process: starts it (sandboxed where the host allows),
// stages the bundle and models it may read, sends it requests and checks what comes back. The
// process runs the tenant's code, so nothing it sends is trusted: answers are checked for shape
// and size, and the replica's own clock, not the process's, is what gets metered.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { copyFile, link, rm, symlink } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { errorBody, type ReplyHeader } from '../../core/contracts.ts';
import { unrunTiming } from '../channel/timing.ts';
import { PLATFORM_NODE_MODULES } from '../../core/bundle-dir.ts';
import type { Logger } from '../../core/log.ts';
import { letThrough, SANDBOX_UID_BASE, SandboxCgroup, sandboxCommand, type SandboxLimits, type SandboxSupport } from './sandbox.ts';
import { Outbox } from '../channel/outbox.ts';
import { FrameReader, writeFrame } from '../channel/byte-channel.ts';
import type { Readable, Writable } from 'node:stream';
import { StartFailure, type AssignMessage, type FromUserCode, type RunMessage, type ToUserCode, type UserStats } from '../channel/messages.ts';
import { START_PHASES, type StartPhase } from '../../core/log-lines.ts';

const FROM_SOURCE = import.meta.url.endsWith('.ts');
const ENTRY = fileURLToPath(new URL(FROM_SOURCE ? '../user-code/main.ts' : './user-main.mjs', import.meta.url));
const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const TSX = FROM_SOURCE ? import.meta.resolve('tsx') : '';
/**
 * V8 flags of user-code processes. Tensors crossing from model threads are large and
 * short-lived; with V8's default starting heap limit they set off a full mark-compact every few
 * requests, and a 128 MB starting limit lets them die young. Without the memory reducer, which
 * would collect over and over while idle to shrink that heap.
 */
export const USER_CODE_V8_FLAGS = ['--initial-heap-size=128', '--no-memory-reducer'];
/** Where the staged bundle and models appear inside the sandbox. */
const INSIDE = '/opt/embers/fn';
/** Settings the user-code process may see: logging only, never a platform credential. */
const PASSED_ENV = ['EMBERS_LOG_LEVEL', 'EMBERS_LOG_PRETTY', 'CUDA_VISIBLE_DEVICES', 'LANG', 'TZ'];

export interface UserCodeProcessOptions {
  /** The replica's id: names its staging folder and cgroup. */
  id: string;
  /** Where the staging folder goes (the node's cache folder). */
  cacheDir: string;
  log: Logger;
  /** What the host can enforce; null: run without a sandbox (EMBERS_ALLOW_UNSANDBOXED or a trusted tenant on a host that cannot). */
  sandbox: SandboxSupport | null;
  limits: SandboxLimits;
  /** V8 flags for the process. */
  execArgv: string[];
  /** GPU device nodes to bind inside (CUDA). */
  devices?: string[];
  /** Largest answer (bytes) taken from the process (EMBERS_MAX_ANSWER_BYTES). */
  maxAnswerBytes: number;
}

export interface UserCodeExit {
  code: number | null;
  signal: NodeJS.Signals | null;
  /** Killed by the kernel for going over its memory limit. */
  oom: boolean;
}

type Result = Extract<FromUserCode, { type: 'result' }>;
export type CheckedResult = Omit<Result, 'type' | 'n' | 'bytes'> & { bytes?: { contentType: string; data: Buffer; headerLength?: number } };

export class UserCodeProcess {
  private readonly child: ChildProcess;
  private readonly staging: string;
  private readonly cgroup?: SandboxCgroup;
  private readonly waiting = new Map<number, (r: CheckedResult) => void>();
  /** Where the chunks of runs that stream go (runtime/replica/chunk-sink.ts checks them), by run. */
  private readonly chunkTargets = new Map<number, (data: unknown) => void>();
  /** Where the `ctx.log` lines of tailed runs go (unchecked: runtime/replica/tail.ts checks them), by run. */
  private readonly logTargets = new Map<number, (call: unknown) => void>();
  private next = 1;
  private readonly outbox = new Outbox<ToUserCode>((messages) => {
    if (this.child.connected) this.child.send(messages, undefined, undefined, (err) => err && this.o.log.debug({ err: err.message }, 'could not reach the user-code process'));
  });
  private readonly booted: Promise<void>;
  private readonly bytesOut: Writable;
  private readonly frames: FrameReader;
  private started?: { resolve: (m: FromUserCode) => void };
  private lastStats?: UserStats;
  /** When the process last sent anything (it answers stats requests unless its thread is held). */
  private heardAt = Date.now();
  private exitInfo?: UserCodeExit;
  readonly exited: Promise<UserCodeExit>;
  /** Set by the replica: the process asks to be replaced, or announces live requests. */
  onStuck: (rid: string) => void = () => {};
  onAnnounce: (busy: boolean) => void = () => {};
  /** Called as the process exits, before what it held is answered. */
  onExit: (e: UserCodeExit) => void = () => {};
  /** The process dropped `count` log lines of tailed runs (over its budget). */
  onLogsDropped: (count: number) => void = () => {};
  /** A `ctx.log` line of setup or warmup (unchecked: the replica caps it, as a run's). */
  onStartLog: (phase: StartPhase, call: unknown) => void = () => {};

  constructor(private readonly o: UserCodeProcessOptions) {
    this.staging = path.join(o.cacheDir, 'staging', o.id);
    const sandbox = o.sandbox;
    if (sandbox?.cgroup) {
      try {
        this.cgroup = SandboxCgroup.create(sandbox.cgroup, o.id, o.limits);
      } catch (err) {
        o.log.warn({ err: (err as Error).message }, 'could not make the user-code process a cgroup: it runs with rlimits only');
      }
    }
    const env: Record<string, string> = { HOME: '/tmp', PATH: '/usr/bin:/bin', TMPDIR: '/tmp' };
    for (const k of PASSED_ENV) if (process.env[k] !== undefined) env[k] = process.env[k]!;
    const node = [process.execPath, ...o.execArgv, ...(FROM_SOURCE ? ['--import', TSX] : []), ENTRY];
    // Inside, the platform's code and packages sit where they are outside (a bundle's
    // node_modules link points there); the staging folder holds this replica's bundle and models.
    const readOnly = FROM_SOURCE
      ? ['runtime', 'core', 'native', 'package.json'].map((p) => path.join(ROOT, p)).concat(PLATFORM_NODE_MODULES)
      : [path.dirname(ENTRY), PLATFORM_NODE_MODULES];
    const execDir = path.dirname(path.dirname(process.execPath));
    if (!process.execPath.startsWith('/usr/')) readOnly.push(execDir);
    const cmd = sandboxCommand({
      node,
      readOnly,
      mounts: [{ from: this.staging, to: INSIDE }],
      devices: o.devices ?? [],
      limits: o.limits,
      uid: sandbox?.ownUid ? SANDBOX_UID_BASE + process.pid : undefined,
      cgroupProcs: this.cgroup?.procs ?? [],
      isolate: !!sandbox?.isolates,
      rlimits: sandbox?.rlimits ?? false,
      noNestedUserns: sandbox?.noNestedUserns ?? false,
    });
    // The staging folder must exist before bwrap binds it.
    mkdirSync(path.join(this.staging, 'models'), { recursive: true });
    if (sandbox?.ownUid) for (const p of [this.staging, ...readOnly]) letThrough(p);
    // fd 3: the JSON channel; 4 and 5: the byte channel to and from the process (byte-channel.ts).
    this.child = spawn(cmd.command, cmd.args, { stdio: ['ignore', 'inherit', 'inherit', 'ipc', 'pipe', 'pipe'], env, serialization: 'json' });
    this.bytesOut = this.child.stdio[4] as Writable;
    this.bytesOut.on('error', () => {});
    this.frames = new FrameReader((this.child.stdio as unknown as Readable[])[5], {
      maxBytes: o.maxAnswerBytes,
      maxHeld: 1024,
      onCorrupt: (why) => {
        o.log.error({ why }, 'the user-code process broke its byte channel: killed');
        this.child.kill('SIGKILL');
      },
    });
    this.exited = new Promise((resolve) =>
      this.child.once('exit', (code, signal) => {
        this.exitInfo = { code, signal, oom: this.cgroup?.oomKilled() ?? false };
        this.onExit(this.exitInfo);
        resolve(this.exitInfo);
      }),
    );
    void this.exited.then(() => this.cleanUp());
    this.booted = new Promise<void>((resolve, reject) => {
      this.child.on('message', (messages: FromUserCode[]) => {
        // Sent by the tenant's code: only an array of messages is read.
        if (Array.isArray(messages)) for (const m of messages) this.receive(m, resolve);
      });
      void this.exited.then((e) => reject(new Error(`the user-code process exited before it booted (${describeExit(e)})`)));
    });
    this.booted.catch(() => {});
  }

  /** Resolves once the process has booted (modules loaded) and waits for its assignment. */
  ready(): Promise<void> {
    return this.booted;
  }

  get pid(): number | undefined {
    return this.child.pid;
  }

  /** How long since the process last sent anything (ms). */
  silentMs(): number {
    return Date.now() - this.heardAt;
  }

  /** Bytes its cgroup uses now (undefined without one). */
  memoryBytes(): number | undefined {
    return this.cgroup?.memoryBytes();
  }

  /**
   * Stages the bundle and models (hard links to the node's cache, or copies across file systems)
   * and has the process load them; resolves with its phases, or rejects with the failed phase.
   */
  async assign(a: Omit<AssignMessage, 'type' | 'bundlePath' | 'models'>, bundleFile: string, models: Record<string, { path: string; bytes: number }>): Promise<Extract<FromUserCode, { type: 'started' }>['phases']> {
    await this.booted;
    const inside = (p: string) => (this.o.sandbox?.isolates ? path.join(INSIDE, path.relative(this.staging, p)) : p);
    const bundle = path.join(this.staging, 'bundle.mjs');
    await place(bundleFile, bundle);
    await symlink(PLATFORM_NODE_MODULES, path.join(this.staging, 'node_modules'), 'dir').catch(() => {});
    const staged: AssignMessage['models'] = {};
    for (const [name, m] of Object.entries(models)) {
      const file = path.join(this.staging, 'models', `${name}.onnx`);
      await place(m.path, file);
      staged[name] = { path: inside(file), bytes: m.bytes };
    }
    const reply = await new Promise<FromUserCode>((resolve, reject) => {
      this.started = { resolve };
      void this.exited.then((e) => reject(new StartFailure(e.oom ? 'out of memory' : 'exited', this.exitMessage(e))));
      this.send({ ...a, type: 'assign', bundlePath: inside(bundle), models: staged });
    });
    if (reply.type === 'start_failed') throw new StartFailure(String(reply.phase).slice(0, 32), String(reply.message).slice(0, 2000));
    if (reply.type !== 'started') throw new StartFailure('bundle', 'the user-code process answered its assignment with something else');
    // Only the four numbers: the record they go into is stored in Redis.
    const ms = (v: unknown) => (typeof v === 'number' && Number.isFinite(v) && v >= 0 ? v : 0);
    const p = (reply.phases ?? {}) as Record<string, unknown>;
    return { bundleMs: ms(p.bundleMs), modelLoadMs: ms(p.modelLoadMs), setupMs: ms(p.setupMs), warmupMs: ms(p.warmupMs) };
  }

  /**
   * Runs a request; always resolves (a process that exits meanwhile answers 500 or 503 replica_oom).
   * `onChunk` takes the chunks of a run that streams (`streamTo`), as the process sent them;
   * `onLog` the `ctx.log` lines of a tailed one (`tail`).
   */
  run(m: Omit<RunMessage, 'type' | 'n' | 'rawBytes'>, onChunk?: (data: unknown) => void, onLog?: (call: unknown) => void): { n: number; result: Promise<CheckedResult> } {
    const n = this.next++;
    if (onChunk) this.chunkTargets.set(n, onChunk);
    if (onLog) this.logTargets.set(n, onLog);
    const body = m.raw !== undefined ? (m.input as Record<string, unknown> | null)?.[m.raw] : undefined;
    let rawBytes: number | undefined;
    if (body instanceof Uint8Array) {
      const { [m.raw!]: _, ...rest } = m.input as Record<string, unknown>;
      m = { ...m, input: rest };
      rawBytes = body.length;
    }
    const result = new Promise<CheckedResult>((resolve) => {
      if (this.exitInfo) return resolve(this.exitResult(this.exitInfo, m.queueMs));
      this.waiting.set(n, resolve);
      // The bytes before the message that names them: the process waits for whichever comes last.
      if (rawBytes !== undefined) writeFrame(this.bytesOut, n, body as Uint8Array);
      this.send({ ...m, type: 'run', n, ...(rawBytes !== undefined ? { rawBytes } : {}) });
    });
    return { n, result };
  }

  abort(n: number, canceled: boolean): void {
    if (this.waiting.has(n)) this.send({ type: 'abort', n, canceled });
  }

  /** Lets run `n` send `k` more chunks. */
  credit(n: number, k: number): void {
    if (this.waiting.has(n)) this.send({ type: 'credit', n, k });
  }

  peer(id: string, busy: boolean): void {
    this.send({ type: 'peer', id, busy });
  }

  /** The latest stats the process sent, and asks for fresh ones. */
  stats(): UserStats | undefined {
    this.send({ type: 'stats' });
    return this.lastStats;
  }

  /** Stops the process (SIGKILL: it holds nothing the platform needs) and waits for it. */
  async kill(): Promise<UserCodeExit> {
    if (!this.exitInfo) this.child.kill('SIGKILL');
    return this.exited;
  }

  private send(m: ToUserCode): void {
    this.outbox.push(m);
  }

  private receive(m: FromUserCode, booted: () => void): void {
    this.heardAt = Date.now();
    switch (m?.type) {
      case 'standby':
        booted();
        break;
      case 'started':
      case 'start_failed':
        this.started?.resolve(m);
        this.started = undefined;
        break;
      case 'result': {
        const resolve = this.waiting.get(m.n);
        if (!resolve) return;
        this.waiting.delete(m.n);
        this.chunkTargets.delete(m.n);
        this.logTargets.delete(m.n);
        // A binary answer's bytes come on the byte channel (checkResult checks their length).
        const length = (m.bytes as { length?: unknown } | undefined)?.length;
        if (m.bytes === undefined || typeof length !== 'number') resolve(checkResult(m, this.o.maxAnswerBytes));
        else void this.frames.take(m.n).then((data) => resolve(checkResult(m, this.o.maxAnswerBytes, data)));
        break;
      }
      case 'chunk':
        this.chunkTargets.get(m.n)?.(m.data);
        break;
      case 'log':
        if (m.call !== undefined) {
          if (m.phase === undefined) this.logTargets.get(m.n)?.(m.call);
          else if (START_PHASES.includes(m.phase)) this.onStartLog(m.phase, m.call);
        }
        if (typeof m.dropped === 'number' && m.dropped > 0) this.onLogsDropped(Math.min(m.dropped, 1e9));
        break;
      case 'announce':
        this.onAnnounce(m.busy === true);
        break;
      case 'stuck':
        this.onStuck(String(m.rid).slice(0, 200));
        break;
      case 'stats':
        // Written into the replica's record in Redis on every heartbeat: bounded.
        if (JSON.stringify(m.stats ?? null).length <= MAX_STATS_CHARS) this.lastStats = m.stats;
        break;
    }
  }

  /** What an exit means, for a person: out of memory (with the limit), or its code or signal. */
  exitMessage(e: UserCodeExit): string {
    return e.oom ? `the user-code process went over its memory limit (${Math.round(this.o.limits.memoryBytes / 2 ** 20)} MiB) and was killed` : `the user-code process exited (${describeExit(e)})`;
  }

  private exitResult(e: UserCodeExit, queueMs: number): CheckedResult {
    const status = e.oom ? 503 : 500;
    const code = e.oom ? 'replica_oom' : 'replica_crashed';
    return { status, body: JSON.stringify(errorBody(code, this.exitMessage(e))), timing: unrunTiming(queueMs) };
  }

  private cleanUp(): void {
    this.chunkTargets.clear();
    this.logTargets.clear();
    for (const [n, resolve] of this.waiting) {
      this.waiting.delete(n);
      resolve(this.exitResult(this.exitInfo!, 0));
    }
    this.cgroup?.remove();
    // The sandbox's processes die just after bwrap (--die-with-parent): try again once they have.
    if (this.cgroup) setTimeout(() => this.cgroup!.remove(), 2_000).unref();
    void rm(this.staging, { recursive: true, force: true }).catch(() => {});
  }
}

async function place(from: string, to: string): Promise<void> {
  await rm(to, { force: true });
  await link(from, to).catch(() => copyFile(from, to));
}

function describeExit(e: UserCodeExit): string {
  return e.signal ? `signal ${e.signal}` : `code ${e.code}`;
}

/** Largest stats message kept (a few models' counters take a few hundred characters). */
const MAX_STATS_CHARS = 64 * 1024;


/** Content types a handler may answer with: a token/token, parameters without line breaks. */
const CONTENT_TYPE = /^[\w!#$&^.+-]+\/[\w!#$&^.+-]+(?:\s*;[^\r\n]*)?$/;

/**
 * What the replica takes from an answer: a status a handler may give, a string body, bytes
 * with a content type that cannot break a header, within the answer bound; anything else from
 * the process is answered 500 invalid_answer.
 */
export function checkResult(m: Result, maxAnswerBytes: number, data?: Buffer): CheckedResult {
  const invalid = (why: string): CheckedResult => ({ status: 500, body: JSON.stringify(errorBody('invalid_answer', `the function's process sent an answer the platform cannot use: ${why}`)), timing: unrunTiming(0) });
  // A JSON body is measured in UTF-16 units here; the process bounds it in bytes.
  const max = maxAnswerBytes;
  if (!Number.isInteger(m.status) || m.status < 200 || m.status > 599) return invalid('status');
  if (typeof m.body !== 'string') return invalid('body');
  if (m.body.length > max) return invalid('body too large');
  const t = m.timing as Record<string, unknown> | undefined;
  const timing = unrunTiming(0);
  for (const k of Object.keys(timing) as (keyof ReplyHeader['timing'])[]) {
    const v = t?.[k];
    if (typeof v === 'number' && Number.isFinite(v) && v >= 0) timing[k] = v;
  }
  let bytes: CheckedResult['bytes'];
  if (m.bytes !== undefined) {
    const { contentType, length, headerLength } = m.bytes as { contentType?: unknown; length?: unknown; headerLength?: unknown };
    if (typeof contentType !== 'string' || contentType.length > 200 || !CONTENT_TYPE.test(contentType)) return invalid('content type');
    if (!data || length !== data.length || data.length > max) return invalid('bytes');
    if (headerLength !== undefined && !(Number.isSafeInteger(headerLength) && (headerLength as number) > 0 && (headerLength as number) <= data.length)) return invalid('inference header length');
    bytes = { contentType, data, ...(headerLength !== undefined ? { headerLength: headerLength as number } : {}) };
  }
  const checked: CheckedResult = { status: m.status, body: m.body, bytes, timing, canceled: m.canceled === true || undefined };
  if (m.streamed === true) checked.streamed = true;
  return checked;
}
