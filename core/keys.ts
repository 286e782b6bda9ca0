// Every Redis key, channel and BullMQ queue name the platform uses, built here and nowhere else.
// Keys are `embers:`-prefixed; a function goes by its key (core/names.ts) in every name below.

export const keys = {
  functionIndex: 'embers:functions',
  /**
   * Functions that may have work (a request was queued, a version deployed) since the scheduler
   * last found them with none: what it watches, besides those with replicas, so that a pass costs
   * what is active rather than what is deployed (scheduler/scheduler.ts).
   */
  active: 'embers:active',
  function: (name: string) => `embers:function:${name}`,
  versions: (name: string) => `embers:function:${name}:versions`,
  versionSeq: (name: string) => `embers:function:${name}:seq`,
  /** A function's secrets: name → JSON { sealed, createdAt, updatedAt } (core/secrets.ts); never the plain value. */
  secrets: (name: string) => `embers:function:${name}:secrets`,
  replica: (id: string) => `embers:replica:${id}`,
  /** fn → its recent idle times (JSON ms, oldest first): keep-alive's learning, kept across scheduler leaders and restarts. */
  idleTimes: 'embers:idle-times',
  /** A function's footprint per version: version → the most bytes a replica of it held (replica process and user code). */
  footprints: (fn: string) => `embers:footprints:${fn}`,
  /** Replica id → the node that runs it, from spawn to exit: outlives the replica's record, for scheduler/orphans.ts. */
  replicaNodes: 'embers:replica-nodes',
  replicas: (name: string) => `embers:function:${name}:replicas`,
  replyChannel: (gatewayId: string) => `embers:reply:${gatewayId}`,
  registryChannel: 'embers:registry',
  coldStarts: (name: string) => `embers:function:${name}:coldstarts`,
  node: (id: string) => `embers:node:${id}`,
  nodes: 'embers:nodes',
  /** Functions whose traffic an automatic rollout moves: the leading scheduler judges them each pass (scheduler/rollouts.ts). */
  rollouts: 'embers:rollouts',
  /** fn → JSON PlacementRecord, written by the leading scheduler. */
  placement: 'embers:placement',
  /** fn → JSON ScaleRecord: the last decision and why. */
  desired: 'embers:desired',
  leader: 'embers:scheduler:leader',
  /** Async job record (hash) and the tombstone that outlives it, so an expired id answers "expired". */
  job: (id: string) => `embers:job:${id}`,
  jobGone: (id: string) => `embers:job:${id}:gone`,
  /** A finished job's result of 16 KiB or more, kept beside its record (core/jobs.ts). */
  jobResult: (id: string) => `embers:job:${id}:result`,
  /**
   * Replicas listen here for cancellations of running async jobs, `<function> <job id>`, for sync
   * runs whose caller went away, `<function> <the gateway's request id>`, and for
   * `<function> +scan` (SCAN_NOW): live requests of that function were handed over, to be taken now.
   */
  cancelChannel: 'embers:cancel',
  /** Functions a function called (`ctx.call`), and those that called it: key → last call (ms), kept two hours (runtime/replica/calls.ts). */
  callsOut: (fn: string) => `embers:calls:${fn}:out`,
  callsIn: (fn: string) => `embers:calls:${fn}:in`,
  /** Replicas on one node announce "<replica> 1" when busy with live requests, "<replica> 0" when idle (runtime/user-code/live-first.ts). */
  liveChannel: (node: string) => `embers:live:${node}`,
  batch: (id: string) => `embers:batch:${id}`,
  /** line → `o{json}` or `e{json}`: a line's outcome, written once (HSETNX) whatever retries happen. */
  batchResults: (id: string) => `embers:batch:${id}:results`,
  /** job id → the job, for the batch's queued jobs taken out of its queue while it is paused (scheduler/batch-hold.ts). */
  batchHeld: (id: string) => `embers:batch:${id}:held`,
  /** Batches the feeder still works on. */
  activeBatches: 'embers:batches:active',
  /** Root of webhook signing secrets when EMBERS_WEBHOOK_SECRET is unset. */
  webhookSecret: 'embers:webhook-secret',
  /** Every batch by creation time, for listing. */
  batches: 'embers:batches',
  /**
   * A streamed answer's chunks (core/chunks.ts): a stream per request, by the gateway's request id
   * (a sync run) or the job id; each entry's id is `0-<seq>`, its sequence number.
   */
  chunks: (id: string) => `embers:chunks:${id}`,
  /** The chunks kept of an async job, in bytes (core/lua/chunks-add.lua trims by it). */
  chunkBytes: (id: string) => `embers:chunks:${id}:bytes`,
  /** Readers of a request's chunks hear here that chunks were added, or that its job ended. */
  chunksChannel: (id: string) => `embers:chunks:${id}:new`,
  /** A Files API upload's record (hash), and a tenant's uploads by creation time. */
  file: (id: string) => `embers:file:${id}`,
  files: (tenant: string) => `embers:tenant:${tenant}:files`,
  /** A tenant's async jobs by creation time (ms), the newest kept (core/jobs.ts). */
  recentJobs: (tenant: string) => `embers:tenant:${tenant}:jobs`,
  /**
   * A function's tail (core/tail.ts): its replicas' `ctx.log` lines and one line per finished
   * request, a stream capped by count and bytes, written only while `tailing` is set.
   */
  tail: (fn: string) => `embers:tail:${fn}`,
  /** Set, with a short time to live, by every gateway tailing the function, for as long as it does. */
  tailing: (fn: string) => `embers:tail:${fn}:on`,
  /** A function's per-minute roll-up (core/series.ts): metric → value, per UTC minute (YYYYMMDDHHmm). */
  series: (fn: string, minute: string) => `embers:series:${fn}:${minute}`,
};

export const tenantKeys = {
  /** tenant id → JSON Tenant */
  tenants: 'embers:tenants',
  /** sha256(secret) hex → JSON ApiKey: the one read an authenticated request costs. */
  keysByHash: 'embers:apikeys',
  /** key id → sha256(secret) hex, for listing and revoking a tenant's keys. */
  tenantKeys: (tenant: string) => `embers:tenant:${tenant}:keys`,
  /** A tenant's registered buckets: bucket name → its record (core/buckets.ts). */
  buckets: (tenant: string) => `embers:tenant:${tenant}:buckets`,
};

export const usageKeys = {
  seen: (id: string) => `embers:usage:seen:${id}`,
  records: 'embers:usage:records',
  /** fn|metric → value, per tenant and UTC hour (YYYYMMDDHH). */
  hour: (tenant: string, hour: string) => `embers:usage:${tenant}:${hour}`,
  /**
   * fn|version|metric → value per tenant and UTC month (YYYYMM), and the month-to-date totals as
   * `*|metric` (core/lua/usage.lua): invoices and budgets read these, never the records.
   */
  month: (tenant: string, month: string) => `embers:usage:${tenant}:month:${month}`,
  tenants: 'embers:usage:tenants',
  /** The id of the last record exported to S3 (scheduler/usage-exporter.ts): `records` holds only those after it. */
  exportCursor: 'embers:usage:export:cursor',
  /** JSON { after, last }: the range an exporter is writing to S3, set before its first file (core/usage-export-plan.ts). */
  exportIntent: 'embers:usage:export:intent',
};

/** Monthly budgets (core/budgets.ts). */
export const budgetKeys = {
  /** tenant → JSON Budget. */
  budgets: 'embers:budgets',
  /** alertId → when its webhook was queued, per UTC month (YYYYMM): each alert goes once. */
  alerted: (month: string) => `embers:budgets:alerted:${month}`,
};

/** Per API key: its requests this second, and the requests it has in flight (gateway/quotas.ts). */
export const quotaKeys = {
  rate: (tenant: string, keyId: string, second: number) => `embers:quota:rate:${tenant}:${keyId}:${second}`,
  inFlight: (tenant: string, keyId: string) => `embers:quota:inflight:${tenant}:${keyId}`,
};

/** A function's live requests: a stream whose name is this prefix and the function's key (core/live-queue.ts). */
export const STREAM_PREFIX = 'embers:stream:';
/** The stream of a function's live requests. */
export const liveStream = (fn: string) => `${STREAM_PREFIX}${fn}`;
/**
 * A live entry's large part (its binary body or input), kept beside the stream rather than in it
 * (core/live-queue.ts): the entry's function and id name it. Entry ids never hold ':'.
 */
export const SPILL_PREFIX = 'embers:spill:';
export const spillKey = (fn: string, entry: string) => `${SPILL_PREFIX}${fn}:${entry}`;
/** Where the gateway writes a large part before its entry exists; queueing the entry renames it to spillKey. */
export const newSpillKey = (token: string) => `embers:spill-new:${token}`;

/** On the cancel channel in place of a job id: scan the live queue for handed-over requests now (core/live-queue.ts). */
export const SCAN_NOW = '+scan';

/** On the cancel channel in place of a job id: a gateway began tailing the function, so its replicas write the tail now. */
export const TAIL_NOW = '+tail';

/** BullMQ queues (a function's batch lines, webhook deliveries) live under this prefix. */
export const QUEUE_PREFIX = 'embers';

/**
 * The BullMQ queue of a function's batch lines. Live requests (sync and async) ride the
 * function's Redis stream instead (core/live-queue.ts); a replica serves both with separate
 * slots, live first. `fn` is the function's key (core/names.ts): no two functions share one, and
 * no other queue name ends in ".batch".
 */
export const batchQueueName = (fn: string) => `${fn}.batch`;

/** A key of BullMQ's own under a function's batch queue (its `wait` list, `active` list, `prioritized` and `delayed` sets), read directly by the scheduler. */
export const batchQueueKey = (fn: string, part: 'wait' | 'active' | 'prioritized' | 'delayed') => `${QUEUE_PREFIX}:${batchQueueName(fn)}:${part}`;

/** Queue (under QUEUE_PREFIX) of webhook deliveries; "_" keeps it apart from function names. */
export const WEBHOOK_QUEUE = '_webhooks';
