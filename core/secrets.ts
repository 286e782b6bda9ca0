// A function's secrets: values its handler reads as `ctx.env.NAME`, kept in Redis sealed with
// AES-256-GCM under EMBERS_SECRETS_KEY (sealed.ts), each bound to its function and name, so a
// sealed value copied to another function or name does not open. Only names and dates are ever
// listed; a value is opened only by the replica that hands it to its user-code process.
import type { Redis } from 'ioredis';
import { keys } from './keys.ts';
import { lua } from './lua.ts';
import { evalScript } from './redis.ts';
import type { Sealer } from './sealed.ts';
import { MAX_SECRETS_PER_FUNCTION } from './function-env.ts';

/** What a listing shows of a secret: never its value. */
export interface SecretView {
  object: 'secret';
  name: string;
  createdAt: string;
  updatedAt: string;
}

interface SecretRecord {
  sealed: string;
  createdAt: string;
  updatedAt: string;
}

/** A secret that does not open with this platform's key (another EMBERS_SECRETS_KEY, or altered in Redis). */
export class UnopenableSecret extends Error {
  constructor(readonly secret: string) {
    super(`secret ${secret} cannot be opened with this platform's EMBERS_SECRETS_KEY (set with another key, or altered); put it again with \`embers secrets put\``);
  }
}

const sealContext = (fn: string, name: string) => `secret:${fn}:${name}`;

const PUT = lua('secret-put');

export class FunctionSecrets {
  /** `sealer`: null when EMBERS_SECRETS_KEY is not configured (nothing can be put or opened). */
  constructor(
    private readonly redis: Redis,
    readonly sealer: Sealer | null,
  ) {}

  /** Keeps `value` sealed as `fn`'s secret `name` (`fn`: the function's key, core/names.ts). */
  async put(fn: string, name: string, value: string, max = MAX_SECRETS_PER_FUNCTION): Promise<'added' | 'replaced' | 'too_many' | 'no_function'> {
    if (!this.sealer) throw new Error('EMBERS_SECRETS_KEY is not set');
    const sealed = this.sealer.seal(value, sealContext(fn, name));
    const r = (await evalScript(this.redis, PUT, 3, keys.functionIndex, keys.function(fn), keys.secrets(fn), name, sealed, new Date().toISOString(), max, fn)) as number;
    return r === 1 ? 'added' : r === 2 ? 'replaced' : r === 0 ? 'too_many' : 'no_function';
  }

  async list(fn: string): Promise<SecretView[]> {
    const all = await this.redis.hgetall(keys.secrets(fn));
    return Object.entries(all)
      .map(([name, raw]) => {
        const r = JSON.parse(raw) as SecretRecord;
        return { object: 'secret' as const, name, createdAt: r.createdAt, updatedAt: r.updatedAt };
      })
      .sort((a, b) => a.name.localeCompare(b.name));
  }

  /** True when there was one. */
  async delete(fn: string, name: string): Promise<boolean> {
    return (await this.redis.hdel(keys.secrets(fn), name)) === 1;
  }

  /**
   * Every secret of `fn`, opened: for the replica, which passes them to its user code over IPC
   * and nowhere else. Throws (naming the secret, never its value) when one does not open.
   */
  async open(fn: string): Promise<Record<string, string>> {
    const all = await this.redis.hgetall(keys.secrets(fn));
    const out: Record<string, string> = {};
    for (const [name, raw] of Object.entries(all)) {
      if (!this.sealer) throw new Error(`${fn} has secrets, but this replica has no EMBERS_SECRETS_KEY to open them; its operator sets the same one on every gateway, agent and replica`);
      const plain = this.sealer.open((JSON.parse(raw) as SecretRecord).sealed, sealContext(fn, name));
      if (plain === null) throw new UnopenableSecret(name);
      out[name] = plain;
    }
    return out;
  }
}
