// What a route module says about its routes, for the OpenAPI document (gateway/openapi/document.ts):
// the zod schemas its handlers validate with, and what they answer. Each module exports one
// RouteGroup beside its routes; app.ts mounts both together (`mount(prefix, routes, group)`).
import type { z } from 'zod';
import type { Scope } from '../../core/tenants.ts';

export type Method = 'get' | 'put' | 'post' | 'delete' | 'head';

/** A JSON Schema written out, for what zod does not describe: bytes, JSONL text, any JSON. */
export interface RawSchema {
  jsonSchema: Record<string, unknown>;
}

/** A body's or a response's schema for one media type. */
export type Content = z.ZodType | RawSchema;

export interface ResponseSpec {
  description: string;
  /** By media type; none: no body. */
  content?: Record<string, Content>;
  /** Response headers it sets, by name: what each says. */
  headers?: Record<string, string>;
}

/**
 * Who may call an operation: anyone, anyone (a key changes the answer: `optional`), any valid
 * key, a key with this scope, or the admin key. The document shows it as the operation's
 * security and says it in words.
 */
export type Access = 'public' | 'optional' | 'key' | Scope | 'admin';

export interface Operation {
  method: Method;
  /** As Hono routes it, relative to where the module is mounted: `/:name`. */
  path: string;
  /** Unique over the whole API: a client generator's method name. */
  id: string;
  summary: string;
  description?: string;
  access: Access;
  /** The handler reads `?tenant=` (actingTenant): the admin key acting for a tenant. */
  actsForTenant?: boolean;
  /** One field per `:param` of the path. */
  params?: z.ZodObject;
  query?: z.ZodObject;
  headers?: z.ZodObject;
  body?: { description?: string; required?: boolean; content: Record<string, Content> };
  /** What it answers when it succeeds, by status. */
  responses: Record<number, ResponseSpec>;
  /** The ErrorBody answers a caller can act on, by status: when each comes. 401 and 403 follow from `access`. */
  errors?: Record<number, string>;
}

/** A route module's operations, under one tag of the document. */
export interface RouteGroup {
  tag: string;
  description: string;
  operations: Operation[];
}

/** A group where app.ts mounted its routes. */
export interface MountedGroup {
  prefix: string;
  group: RouteGroup;
}

/** Bytes of any type: a model file, a binary run input or output. */
export const bytes = (description?: string): RawSchema => ({ jsonSchema: { type: 'string', format: 'binary', ...(description ? { description } : {}) } });

/** JSON Lines text (application/x-ndjson). */
export const jsonLines = (description: string): RawSchema => ({ jsonSchema: { type: 'string', description } });

/** Any JSON value: what a function answers, whose output has no schema. */
export const anyJson = (description: string): RawSchema => ({ jsonSchema: { description } });
