// Messages between a replica and its user-code process travel in arrays: whatever one side
// sends within a tick (the runs of one queue read, the answers of one burst of handlers) goes
// as one frame (frames.ts), so a busy replica pays for one write and one parse per burst, not per
// request.
export class Outbox<M> {
  private queued: M[] = [];

  constructor(private readonly write: (messages: M[]) => void) {}

  push(message: M): void {
    if (this.queued.push(message) === 1) process.nextTick(this.flush);
  }

  private readonly flush = (): void => {
    const messages = this.queued;
    this.queued = [];
    this.write(messages);
  };
}
