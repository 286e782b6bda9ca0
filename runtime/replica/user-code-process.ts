// The replica's side of its user-code process: starts it (sandboxed where the host allows),
// stages the bundle and models it may read, sends it requests and checks what comes back. The
// process runs the tenant's code, so nothing it sends is trusted: the channel is read as hostile
// input (user-code-channel.ts), each message is checked against what the replica already knows
// (a result only for a run in flight, chunks within their credit, stats only when asked, `stuck`
// only naming a run it was sent), and a process that breaks a bound is ended. The replica's own
// clock, not the process's, is what gets metered and what bounds a live run's time.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { copyFile, link, rm, symlink } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { PLATFORM_NODE_MODULES } from '../../core/bundle-dir.ts';
import type { Logger } from '../../core/log.ts';
import { letThrough, SANDBOX_UID_BASE, SandboxCgroup, sandboxCommand, type SandboxLimits, type SandboxSupport } from './sandbox.ts';
import { INSIDE_NODE_MODULES, userCodeLaunch } from './user-code-layout.ts';
import { Outbox } from '../channel/outbox.ts';
import { BYTES, writeFrame, writeMessages } from '../channel/frames.ts';
import type { Readable, Writable } from 'node:stream';
import { StartFailure, type AssignMessage, type CallRequest, type FromUserCode, type RunMessage, type ToUserCode, type UserStats } from '../channel/messages.ts';
import { errorBody } from '../../core/contracts.ts';
import { START_PHASES, type StartPhase } from '../../core/log-lines.ts';
import { SEND_WINDOW } from '../../core/chunk-limits.ts';
import { checkResult, checkStats, UserCodeReader, type CheckedResult } from './user-code-channel.ts';
import { RunsInFlight } from './runs-in-flight.ts';
import { RunWatch, TIMEOUT_SLACK_MS } from './run-watch.ts';
import { describeExit, exitMessage, exitResult, type UserCodeExit } from './user-code-exit.ts';

export type { UserCodeExit } from './user-code-exit.ts';

export { checkResult, type CheckedResult } from './user-code-channel.ts';

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


/** Longest the replica reads what an ended process left in its pipe. */
const EXIT_READ_MS = 500;

export class UserCodeProcess {
  private readonly child: ChildProcess;
  private readonly staging: string;
  private readonly cgroup?: SandboxCgroup;
  /** Runs sent and not answered, by their number on the channel. */
  private readonly runs = new RunsInFlight();
  private next = 1;
  private readonly outbox = new Outbox<ToUserCode>((messages) => writeMessages(this.toChild, messages));
  private readonly booted: Promise<void>;
  private readonly toChild: Writable;
  private readonly reader: UserCodeReader;
  /** Where the process is: booting, standby (booted), assigned (loading), started. */
  private phase: 'booting' | 'standby' | 'assigned' | 'started' = 'booting';
  private started?: { resolve: (m: FromUserCode) => void };
  private lastStats?: UserStats;
  /** The models it was given: the only ones its stats may name. */
  private modelNames: string[] = [];
  /** Stats requests sent and not answered: the process may send as many. */
  private statsAsked = 0;
  /** When the process last sent anything (it answers stats requests unless its thread is held). */
  private heardAt = Date.now();
  /** The watch over its runs' time, its thread and its reading. */
  private readonly watch: RunWatch;
  /** The process's cgroup is gone (set once it has exited). */
  private removed?: Promise<void>;
  /** Why the replica is ending the process, once it is. */
  private ending?: { violation?: string; stopped?: boolean };
  private exitInfo?: UserCodeExit;
  readonly exited: Promise<UserCodeExit>;
  /** Set by the replica: the process's handler for run `rid` will not stop (it said so, or its thread is held). */
  onStuck: (rid: string) => void = () => {};
  /** Called as the process exits, before what it held is answered. */
  onExit: (e: UserCodeExit) => void = () => {};
  /** The process dropped `count` log lines of tailed runs (over its budget). */
  onLogsDropped: (count: number) => void = () => {};
  /** The handler no longer waits for call c (any number: the replica's calls check it). */
  onCallAbort: (c: number) => void = () => {};
  /** The handler read `k` more chunks of streamed call c (the replica's calls bound what it owes). */
  onCallCredit: (c: number, k: number) => void = () => {};
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
    // Inside, the platform's code and packages sit at fixed paths (user-code-layout.ts); the
    // staging folder holds this replica's bundle and models.
    const isolate = !!sandbox?.isolates;
    const { node, mounts } = userCodeLaunch({ execPath: process.execPath, execArgv: o.execArgv, entry: ENTRY, tsx: FROM_SOURCE ? TSX : undefined, root: ROOT, nodeModules: PLATFORM_NODE_MODULES }, isolate);
    const cmd = sandboxCommand({
      node,
      mounts: [...mounts, { from: this.staging, to: INSIDE }],
      devices: o.devices ?? [],
      limits: o.limits,
      uid: sandbox?.ownUid ? SANDBOX_UID_BASE + process.pid : undefined,
      cgroupProcs: this.cgroup?.procs ?? [],
      isolate,
      rlimits: sandbox?.rlimits ?? false,
      noNestedUserns: sandbox?.noNestedUserns ?? false,
    });
    // The staging folder must exist before bwrap binds it.
    mkdirSync(path.join(this.staging, 'models'), { recursive: true });
    if (sandbox?.ownUid) for (const p of [this.staging, ...mounts.map((m) => m.from)]) letThrough(p);
    // fd 0: bwrap's options, then nothing; fd 3 and 4: the channel's pipes to and from the process (runtime/channel/frames.ts).
    // fd 5: the process's watchdog names the run holding its thread (runtime/user-code/watchdog.ts).
    // A session of its own: a terminal's Ctrl-C or hangup is for the platform, which stops it in
    // order; the replica alone ends it (and bwrap's --die-with-parent, should the replica die).
    this.child = spawn(cmd.command, cmd.args, { stdio: ['pipe', 'inherit', 'inherit', 'pipe', 'pipe', 'pipe'], env, detached: true });
    this.child.stdin!.on('error', () => {});
    this.child.stdin!.end(cmd.input);
    this.toChild = this.child.stdio[3] as Writable;
    this.toChild.on('error', () => {});
    // Nothing comes back this way: a process that writes here breaks its channel.
    (this.child.stdio[3] as unknown as Readable).once('data', () => this.violation('wrote on the pipe from its replica'));
    let booted!: () => void;
    this.reader = new UserCodeReader((this.child.stdio as unknown as Readable[])[4], {
      // A long JSON body and a binary answer, each within the answer bound.
      maxBytesFrame: o.maxAnswerBytes * 2 + 1024,
      // A run answered at its timeout may still send its answer: taken, and dropped.
      expectsBytes: (n) => (this.runs.get(n) !== undefined && this.runs.get(n)!.bytes === undefined) || this.runs.wasTimedOut(n),
      onBytes: (n, bytes) => {
        const run = this.runs.get(n);
        if (run) run.bytes = bytes;
      },
      onMessage: (m) => this.receive(m, booted),
      onViolation: (why) => this.violation(why),
    });
    const fromChild = (this.child.stdio as unknown as Readable[])[4];
    const drained = new Promise<void>((resolve) => fromChild.once('close', resolve));
    this.exited = new Promise((resolve) =>
      this.child.once('exit', async (code, signal) => {
        this.watch.stop();
        // Answers it sent just before it ended are still in the pipe: read them first (a child
        // of its own holding the pipe open gets EXIT_READ_MS).
        if (!this.ending) await Promise.race([drained, new Promise((r) => setTimeout(r, EXIT_READ_MS))]);
        const e = this.ending ?? {};
        // A crash with one run in the process is that run's; with several, none can be told apart;
        // a stop from outside (a signal the platform's own stop sends) is none of theirs.
        const outside = signal === 'SIGINT' || signal === 'SIGTERM' || signal === 'SIGHUP';
        const lost = e.violation !== undefined || (!e.stopped && !outside && this.runs.size === 1) ? 0 : this.runs.size;
        this.exitInfo = { code, signal, oom: this.cgroup?.oomKilled() ?? false, ...e, lost };
        this.onExit(this.exitInfo);
        resolve(this.exitInfo);
      }),
    );
    void this.exited.then(() => this.cleanUp());
    this.booted = new Promise<void>((resolve, reject) => {
      booted = resolve;
      void this.exited.then((e) => reject(new Error(`the user-code process exited before it booted (${describeExit(e)})`)));
    });
    this.booted.catch(() => {});
    this.watch = new RunWatch(
      {
        runs: this.runs,
        silentMs: () => this.silentMs(),
        unread: () => this.toChild.writableLength,
        probe: () => this.askForStats(),
        stuck: (rid) => this.onStuck(rid),
        violation: (why) => this.violation(why),
      },
      (this.child.stdio as unknown as Readable[])[5],
    );
  }

  /** Ends the process for breaking its channel's bounds; what it held is answered with `why`. */
  violation(why: string): void {
    if (this.ending || this.exitInfo) return;
    this.ending = { violation: why };
    this.reader.stop();
    this.watch.stop();
    this.o.log.error({ why, pid: this.child.pid }, 'the user-code process broke its channel: ending it');
    this.child.kill('SIGKILL');
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
    await symlink(this.o.sandbox?.isolates ? INSIDE_NODE_MODULES : PLATFORM_NODE_MODULES, path.join(this.staging, 'node_modules'), 'dir').catch(() => {});
    const staged: AssignMessage['models'] = {};
    this.modelNames = Object.keys(models);
    for (const [name, m] of Object.entries(models)) {
      const file = path.join(this.staging, 'models', `${name}.onnx`);
      await place(m.path, file);
      staged[name] = { path: inside(file), bytes: m.bytes };
    }
    const reply = await new Promise<FromUserCode>((resolve, reject) => {
      this.started = { resolve };
      this.phase = 'assigned';
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
   * Runs a request. It resolves with the process's checked answer, 504 when a live run outlives
   * `timeoutMs` and the slack, the exit's answer when the process ends holding this run alone, or
   * a violation's answer; it never resolves when the process ends holding several (the replica
   * hands them over: UserCodeExit.lost). `onChunk` takes the chunks of a run that streams
   * (`streamTo`); `onLog` the `ctx.log` lines of a tailed one (`tail`).
   */
  run(m: Omit<RunMessage, 'type' | 'n' | 'rawBytes'>, o: { onChunk?: (data: unknown) => void; onLog?: (call: unknown) => void; onCall?: (call: CallRequest) => void; timeoutMs?: number } = {}): { n: number; result: Promise<CheckedResult> } {
    const n = this.next++;
    const body = m.raw !== undefined ? (m.input as Record<string, unknown> | null)?.[m.raw] : undefined;
    let rawBytes: number | undefined;
    if (body instanceof Uint8Array) {
      const { [m.raw!]: _, ...rest } = m.input as Record<string, unknown>;
      m = { ...m, input: rest };
      rawBytes = body.length;
    }
    const result = new Promise<CheckedResult>((resolve) => {
      // Sent after the process ended (or while it is being ended): never run here, so never
      // answered here; the replica is going away, and the request is handed over with the rest.
      if (this.exitInfo || this.ending) return;
      // Watched whenever the replica gives a time: a call from a batch line runs as batch work in the user code, but holds a live slot.
      const live = o.timeoutMs !== undefined;
      this.runs.add(n, { resolve, onChunk: o.onChunk, chunksLeft: SEND_WINDOW, onLog: o.onLog, onCall: o.onCall, rid: m.rid, ...(live ? { answerBy: Date.now() + o.timeoutMs! + TIMEOUT_SLACK_MS, timeoutMs: o.timeoutMs } : {}) });
      // The bytes before the message that names them, on the same pipe.
      if (rawBytes !== undefined) writeFrame(this.toChild, BYTES, n, body as Uint8Array);
      this.send({ ...m, type: 'run', n, ...(rawBytes !== undefined ? { rawBytes } : {}) });
    });
    return { n, result };
  }

  abort(n: number, canceled: boolean): void {
    if (this.runs.get(n)) this.send({ type: 'abort', n, canceled });
  }

  /** Lets run `n` send `k` more chunks. */
  credit(n: number, k: number): void {
    const run = this.runs.get(n);
    if (!run) return;
    run.chunksLeft += k;
    this.send({ type: 'credit', n, k });
  }

  /** Call c's answer, for the handler that made it. */
  callResult(c: number, status: number, body: string): void {
    this.send({ type: 'call_result', c, status, body });
  }

  /** One chunk of streamed call c. */
  callChunk(c: number, data: string): void {
    this.send({ type: 'call_chunk', c, data });
  }

  /** Whether the node's other replicas run live requests now. */
  peers(busy: boolean): void {
    this.send({ type: 'peers', busy });
  }

  /** The latest stats the process sent, and asks for fresh ones (one at a time, unless its thread is held). */
  stats(): UserStats | undefined {
    this.askForStats();
    return this.lastStats;
  }

  /** One more stats request, unless several wait for an answer already (its thread is held). */
  private askForStats(): void {
    if (this.statsAsked >= 4) return;
    this.statsAsked++;
    this.send({ type: 'stats' });
  }

  /** Stops the process (SIGKILL: it holds nothing the platform needs) and waits for it; what it held is not answered. */
  async kill(): Promise<UserCodeExit> {
    if (!this.exitInfo) {
      this.ending ??= { stopped: true };
      this.watch.stop();
      this.child.kill('SIGKILL');
    }
    const e = await this.exited;
    // Its cgroup goes with it, before the replica exits.
    await this.removed;
    return e;
  }

  private send(m: ToUserCode): void {
    this.outbox.push(m);
  }

  /** One message, checked for shape by the reader; here, against what this replica knows. */
  private receive(m: FromUserCode, booted: () => void): void {
    if (this.ending) return;
    this.heardAt = Date.now();
    this.watch.heard();
    switch (m.type) {
      case 'standby':
        if (this.phase !== 'booting') return this.violation('said it booted twice');
        this.phase = 'standby';
        booted();
        break;
      case 'started':
      case 'start_failed':
        if (this.phase !== 'assigned') return this.violation(`sent ${m.type} when it was not starting`);
        this.phase = 'started';
        this.started?.resolve(m);
        this.started = undefined;
        break;
      case 'result': {
        const run = this.runs.get(m.n);
        // A run the replica answered at its timeout may still finish in the process.
        if (!run) return this.runs.forgetTimedOut(m.n) ? undefined : this.violation(`answered run ${m.n}, which it was not running`);
        if (m.bytes !== undefined && (typeof m.bytes !== 'object' || m.bytes === null)) return this.violation(`answered run ${m.n} with bytes that are not described`);
        const carries = m.bodyBytes !== undefined || m.bytes !== undefined;
        // (Still in flight: the violation answers it with the others.)
        if (carries !== (run.bytes !== undefined)) return this.violation(`answered run ${m.n} ${carries ? 'without' : 'with'} the bytes frame its answer names`);
        this.runs.take(m.n);
        run.resolve(checkResult(m, this.o.maxAnswerBytes, run.bytes));
        break;
      }
      case 'chunk': {
        const run = this.runs.get(m.n);
        if (!run?.onChunk) return this.runs.wasTimedOut(m.n) ? undefined : this.violation(`sent a chunk for run ${m.n}, which does not stream`);
        if (run.chunksLeft-- <= 0) return this.violation(`sent more chunks of run ${m.n} than its credit`);
        run.onChunk(m.data);
        break;
      }
      case 'log':
        if (m.call !== undefined) {
          if (m.phase === undefined) this.runs.get(m.n)?.onLog?.(m.call);
          else if (START_PHASES.includes(m.phase) && this.phase === 'assigned') this.onStartLog(m.phase, m.call);
        }
        if (typeof m.dropped === 'number' && m.dropped > 0) this.onLogsDropped(Math.min(m.dropped, 1e9));
        break;
      case 'stuck': {
        // Its handler may run on long after its answer (at its timeout): any run it was sent.
        if (m.n >= this.next) return this.violation(`said run ${m.n} is stuck, which it was never sent`);
        this.onStuck(this.runs.get(m.n)?.rid ?? `(run ${m.n}, answered at its timeout)`);
        break;
      }
      case 'call': {
        const run = this.runs.get(m.n);
        if (!run) return this.runs.wasTimedOut(m.n) ? undefined : this.violation(`made a call for run ${m.n}, which it was not running`);
        const { type: _, n: __, ...call } = m;
        if (run.onCall) run.onCall(call);
        else this.callResult(m.c, 501, JSON.stringify(errorBody('calls_unavailable', 'this run cannot call other functions')));
        break;
      }
      case 'call_abort':
        this.onCallAbort(m.c);
        break;
      case 'call_credit':
        this.onCallCredit(m.c, m.k);
        break;
      case 'stats':
        if (this.statsAsked <= 0) return this.violation('sent stats nobody asked for');
        this.statsAsked--;
        // Written into the replica's record in Redis on every heartbeat: bounded.
        this.lastStats = checkStats(m.stats, this.modelNames);
        break;
    }
  }

  /** What an exit means, for a person. */
  exitMessage(e: UserCodeExit): string {
    return exitMessage(e, this.o.limits.memoryBytes);
  }

  /** What it held: answered when the exit is theirs to know (a violation, a lone run); else left for the hand-over. */
  private cleanUp(): void {
    const e = this.exitInfo!;
    const held = this.runs.takeAll();
    if (e.lost === 0) for (const run of held) run.resolve(exitResult(e, this.o.limits.memoryBytes, !e.violation));
    this.removed = this.removeCgroup();
    void rm(this.staging, { recursive: true, force: true }).catch(() => {});
  }

  /** The sandbox's processes die just after bwrap (--die-with-parent): tries until they have, 3 s at most. */
  private async removeCgroup(): Promise<void> {
    for (let i = 0; this.cgroup && !this.cgroup.remove() && i < 30; i++) await new Promise((r) => setTimeout(r, 100));
  }
}

async function place(from: string, to: string): Promise<void> {
  await rm(to, { force: true });
  await link(from, to).catch(() => copyFile(from, to));
}


