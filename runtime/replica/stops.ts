// Requests running on a replica that their caller may stop: an async job canceled through DELETE
// /v1/jobs/:id, a sync run whose caller went away (its gateway says so with the request's id).
// Both arrive on the cancel channel as `<function> <id>`. A stop can come between the replica
// reading a request and starting it: it is remembered a while, so that request never runs.

/** A running request's stop: whether its caller asked for it, and what stopping it does. */
export interface StopHandle {
  requested: boolean;
  onStop?: () => void;
}

/** How long, and how many, stops for requests not (yet) running here are remembered. */
const EARLY_MS = 30_000;
const EARLY_MAX = 1024;

export class Stops {
  private readonly running = new Map<string, StopHandle>();
  /** Stops that found no running request, by id: when they came. */
  private readonly early = new Map<string, number>();

  /** A request starts: its handle, already requested when its stop came first. */
  enter(id: string): StopHandle {
    const handle: StopHandle = { requested: this.early.size > 0 && this.early.delete(id) };
    this.running.set(id, handle);
    return handle;
  }

  leave(id: string): void {
    this.running.delete(id);
  }

  /** The caller of request `id` asked to stop it. */
  stop(id: string, now = Date.now()): void {
    const handle = this.running.get(id);
    if (handle) {
      if (handle.requested) return;
      handle.requested = true;
      handle.onStop?.();
      return;
    }
    // Oldest first (a Map keeps its order): those past EARLY_MS, and any past EARLY_MAX.
    for (const [old, at] of this.early) {
      if (now - at < EARLY_MS && this.early.size < EARLY_MAX) break;
      this.early.delete(old);
    }
    this.early.set(id, now);
  }
}
