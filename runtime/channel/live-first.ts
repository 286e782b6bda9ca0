// Live traffic first, on a node. Batch lines have their own worker slots (their own queue), so
// they never keep a live request from being taken; this gate keeps them from taking the CPU or
// GPU from it. A batch line's model calls start no inference while a live request runs in this
// replica or in another replica on the same node (they share its cores), nor for `yieldMs` after
// the last one, so a steady stream of live requests (whose next one arrives within a few ms)
// never finds a batch inference started in the gap before it. A live request can still wait
// for a batch inference that was already running when it arrived: inferences are not preempted.
//
// Replicas tell each other through `announce` (the replica publishes it on its node's channel):
// busy when their first live request arrives, again every `refreshMs` while busy, idle when
// their window closes. A peer that stops announcing counts as idle after 3 × refreshMs. A peer
// going idle opens the gate only yieldMs later: when live traffic moves from one replica to
// another, the new one's "busy" can reach Redis after the old one's "idle".
//
// Both sides of a replica run one: the replica announces from the live requests it hands its
// user code and gets back, and hears its peers (onPeers); the user-code process gates its batch
// lines on its own live requests and on what its replica says of the peers (setPeersBusy). The
// user code announces nothing: what it could say would decide for other tenants.
import { systemClock, type Clock } from '../../core/clock.ts';

export interface LiveFirstOptions {
  yieldMs: number;
  clock?: Clock;
  /** Tells the node's other replicas this one is busy with live requests, or idle again. */
  announce?: (busy: boolean) => void;
  /** @default 1000 */
  refreshMs?: number;
  /** Called when whether peers hold the node (busy, or settling after going idle) changes. */
  onPeers?: (busy: boolean) => void;
}

export class LiveFirst {
  private live = 0;
  /** Since when this replica holds batch work back (null: it does not): from its first live request to yieldMs after its last. */
  private busySince: number | null = null;
  private yieldTimer: unknown = null;
  private refreshTimer: unknown = null;
  private peerTimer: unknown = null;
  /** Busy peers, by id, until when (clock ms). */
  private readonly peers = new Map<string, number>();
  /** The gate stays shut until then after a peer went idle. */
  private settleUntil = Number.NEGATIVE_INFINITY;
  private readonly listeners = new Set<() => void>();
  /** Peers' load as told from outside (setPeersBusy), and what onPeers last said. */
  private toldBusy = false;
  private saidPeers = false;
  private readonly clock: Clock;
  private readonly refreshMs: number;
  /** Times this replica's live requests held batch work back, and the ms they did in all. */
  readonly stats = { yields: 0, heldMs: 0 };

  constructor(private readonly o: LiveFirstOptions) {
    this.clock = o.clock ?? systemClock;
    this.refreshMs = o.refreshMs ?? 1000;
  }

  /** Whether batch work may start a model inference now. */
  get open(): boolean {
    return this.busySince === null && !this.peersHold();
  }

  /** Whether peers hold batch work back: one busy, one settling after going idle, or as told. */
  private peersHold(): boolean {
    return this.toldBusy || this.peersBusy() > 0 || this.clock.now() < this.settleUntil;
  }

  /** What the replica says of its peers (the user-code side hears no peer itself). */
  setPeersBusy(busy: boolean): void {
    this.toldBusy = busy;
    if (!busy) this.notify();
  }

  liveStarted(): void {
    this.live++;
    if (this.busySince !== null) return;
    this.busySince = this.clock.now();
    this.stats.yields++;
    this.o.announce?.(true);
    const refresh = () => {
      this.refreshTimer = this.clock.setTimeout(() => {
        this.o.announce?.(true);
        refresh();
      }, this.refreshMs);
    };
    refresh();
  }

  liveEnded(): void {
    this.live = Math.max(0, this.live - 1);
    if (this.live > 0) return;
    if (this.yieldTimer !== null) this.clock.clearTimeout(this.yieldTimer);
    this.yieldTimer = this.clock.setTimeout(() => {
      this.yieldTimer = null;
      // A live request that came meanwhile schedules this again when it ends.
      if (this.live > 0 || this.busySince === null) return;
      this.stats.heldMs += this.clock.now() - this.busySince;
      this.busySince = null;
      this.clock.clearTimeout(this.refreshTimer);
      this.refreshTimer = null;
      this.o.announce?.(false);
      this.notify();
    }, this.o.yieldMs);
  }

  /** Another replica on the node announced itself busy or idle. */
  peer(id: string, busy: boolean): void {
    if (busy) this.peers.set(id, this.clock.now() + 3 * this.refreshMs);
    else if (this.peers.delete(id)) this.settleUntil = this.clock.now() + this.o.yieldMs;
    this.armPeerExpiry();
    this.tellPeers();
  }

  private tellPeers(): void {
    const hold = this.peersHold();
    if (hold === this.saidPeers) return;
    this.saidPeers = hold;
    this.o.onPeers?.(hold);
  }

  /** Calls `fn` each time the gate may have opened. */
  onOpen(fn: () => void): void {
    this.listeners.add(fn);
  }

  close(): void {
    // Its peers hear it is idle now, not after their announcement expires.
    if (this.busySince !== null) this.o.announce?.(false);
    this.busySince = null;
    for (const t of [this.yieldTimer, this.refreshTimer, this.peerTimer]) if (t !== null) this.clock.clearTimeout(t);
    this.yieldTimer = this.refreshTimer = this.peerTimer = null;
    this.listeners.clear();
  }

  /** Whether another replica on this node is serving live requests (its cores are in use). */
  get peersLive(): boolean {
    return this.toldBusy || this.peersBusy() > 0;
  }

  private peersBusy(): number {
    const now = this.clock.now();
    for (const [id, until] of this.peers) if (until <= now) this.peers.delete(id);
    return this.peers.size;
  }

  private notify(): void {
    if (!this.open) return;
    for (const l of this.listeners) l();
  }

  /** Re-checks when the next peer announcement expires (a peer that died stops counting), or when the settling ends. */
  private armPeerExpiry(): void {
    if (this.peerTimer !== null) this.clock.clearTimeout(this.peerTimer);
    this.peerTimer = null;
    const now = this.clock.now();
    const next = this.peersBusy() > 0 ? Math.min(...this.peers.values()) : this.settleUntil > now ? this.settleUntil : null;
    if (next === null) return;
    this.peerTimer = this.clock.setTimeout(() => {
      this.peerTimer = null;
      this.armPeerExpiry();
      this.tellPeers();
      this.notify();
    }, next - this.clock.now());
  }
}
