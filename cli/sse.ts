// Reads Server-Sent Events from a response body as they arrive (the WHATWG event-stream format):
// `id`, `event` and `data` fields, data lines joined with newlines, comments skipped.

export interface ServerEvent {
  /** The id the event carried, if any. */
  id?: string;
  /** `message` when the event names none. */
  event: string;
  data: string;
}

/** The events of `body`, each as soon as its blank line has arrived. */
export async function* readEvents(body: ReadableStream<Uint8Array> | AsyncIterable<Uint8Array>): AsyncGenerator<ServerEvent> {
  const decoder = new TextDecoder();
  const parser = new EventParser();
  for await (const bytes of body as AsyncIterable<Uint8Array>) yield* parser.push(decoder.decode(bytes, { stream: true }));
  yield* parser.push(`${decoder.decode()}\n\n`);
}

/** Turns text, however it is cut, into events. */
export class EventParser {
  private buffer = '';
  private fields: { id?: string; event?: string; data: string[] } = { data: [] };

  /** The events `text` completes. */
  *push(text: string): Generator<ServerEvent> {
    this.buffer += text;
    for (;;) {
      const m = /\r\n|\r|\n/.exec(this.buffer);
      // A lone \r at the end may be the first half of \r\n.
      if (!m || (m[0] === '\r' && m.index === this.buffer.length - 1)) return;
      const line = this.buffer.slice(0, m.index);
      this.buffer = this.buffer.slice(m.index + m[0].length);
      const event = this.line(line);
      if (event) yield event;
    }
  }

  private line(line: string): ServerEvent | undefined {
    if (line === '') {
      const { id, event, data } = this.fields;
      this.fields = { data: [] };
      return data.length ? { ...(id !== undefined ? { id } : {}), event: event ?? 'message', data: data.join('\n') } : undefined;
    }
    if (line.startsWith(':')) return undefined;
    const colon = line.indexOf(':');
    const name = colon < 0 ? line : line.slice(0, colon);
    const value = colon < 0 ? '' : line.slice(colon + (line[colon + 1] === ' ' ? 2 : 1));
    if (name === 'data') this.fields.data.push(value);
    else if (name === 'event') this.fields.event = value;
    else if (name === 'id' && !value.includes('\0')) this.fields.id = value;
    return undefined;
  }
}
