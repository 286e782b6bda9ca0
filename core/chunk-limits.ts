// What a user-code process may send of a streamed answer: apart from core/chunks.ts (the Redis
// stream) so the user-code side can import it without reaching Redis.

/** Largest chunk (bytes of its JSON); a larger one ends the run 500 `chunk_too_large`. */
export const MAX_CHUNK_BYTES = 64 * 1024;
/** Chunks a user-code process may send ahead of its replica's credit (runtime/user-code/handler-stream.ts). */
export const SEND_WINDOW = 8;
