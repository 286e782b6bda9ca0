// The fleet section's verdicts, printed tables and chart (cold-start fraction against idle
// replica-seconds, one point per keep-alive policy).
import { RSS_TARGET_BYTES, type DeployedAtZero } from './fleet-deployed.ts';
import type { FleetPolicies, PolicyResult } from './fleet.ts';
import { num, table } from './format.ts';

export interface FleetVerdicts {
  /** 0 5xx and 0 lost under every policy. */
  noErrors: boolean;
  /** auto: fewer cold starts than fixed 60 s at no more idle replica-seconds. */
  beatsFixed60: boolean;
  /** auto: no more idle replica-seconds than fixed 600 s, at no more than its cold starts plus 20 %. */
  nearFixed600: boolean;
  /** 1,000 deployed at zero: the process within RSS_TARGET_BYTES, Redis connections as before. */
  zeroCost?: boolean;
}

export interface FleetResult extends FleetPolicies {
  atZero?: DeployedAtZero;
  atZeroError?: string;
  verdicts: FleetVerdicts;
}

export function fleetVerdicts(r: FleetPolicies, atZero?: DeployedAtZero): FleetVerdicts {
  const by = (name: string) => r.policies.find((p) => p.policy === name);
  const [f60, f600, auto] = [by('fixed 60 s'), by('fixed 600 s'), by('auto')];
  return {
    noErrors: r.policies.every((p) => p.status5xx === 0 && p.lost === 0),
    beatsFixed60: !!(auto && f60 && auto.cold < f60.cold && auto.idleReplicaSeconds <= f60.idleReplicaSeconds),
    nearFixed600: !!(auto && f600 && auto.idleReplicaSeconds <= f600.idleReplicaSeconds && auto.cold <= f600.cold * 1.2),
    ...(atZero ? { zeroCost: atZero.after.rssBytes <= RSS_TARGET_BYTES && atZero.after.redisConnections === atZero.before.redisConnections } : {}),
  };
}

const MB = 2 ** 20;

export function formatFleet(r: FleetResult): string {
  const t = r.trace;
  const lines = [
    `Fleet: ${t.functions} functions (${t.byKind.tiny} without models, ${t.byKind.cls} cls, ${t.byKind.ocr} ocr), ${t.requests} requests over ${t.seconds} s after ${t.warmupRequests} unmeasured (seed ${t.seed}); ${t.functionsCalled} called, ${t.calledAtMostTwice} of them at most twice`,
    table(
      ['policy', 'requests', '5xx', 'lost', 'cold', 'cold %', 'cold p50', 'cold p99', 'warm p50', 'warm p99', 'idle replica-s', 'replica-s', 'peak replicas'],
      r.policies.map((p: PolicyResult) => [p.policy, String(p.requests), String(p.status5xx), String(p.lost), String(p.cold), num(p.coldFraction * 100), num(p.coldMs.p50, 0), num(p.coldMs.p99, 0), num(p.warmMs.p50, 0), num(p.warmMs.p99, 0), num(p.idleReplicaSeconds, 0), num(p.replicaSeconds, 0), String(p.peakReplicas)]),
    ),
    ...r.policies.filter((p) => Object.keys(p.errors ?? {}).length).map((p) => `  ${p.policy} errors: ${Object.entries(p.errors).map(([k, n]) => `${n} × ${k}`).join(', ')}`),
    `  auto: fewer cold starts than fixed 60 s at no more idle replica-seconds: ${r.verdicts.beatsFixed60 ? 'yes' : 'NO'}; no more idle replica-seconds than fixed 600 s within its cold starts + 20 %: ${r.verdicts.nearFixed600 ? 'yes' : 'NO'}; 0 5xx and 0 lost: ${r.verdicts.noErrors ? 'yes' : 'NO'}`,
  ];
  const z = r.atZero;
  if (z) {
    lines.push(
      `${z.functions} functions deployed at zero: the npm start process ${num(z.before.rssBytes / MB, 0)} → ${num(z.after.rssBytes / MB, 0)} MB RSS (target ≤ ${RSS_TARGET_BYTES / MB}), idle CPU ${num(z.before.idleCpuPercent)} → ${num(z.after.idleCpuPercent)} % of a core, Redis connections ${z.before.redisConnections} → ${z.after.redisConnections}; deployed in ${num(z.deploySeconds)} s, listed in ${num(z.listMs, 0)} ms`,
    );
  } else if (r.atZeroError) lines.push(`  ! 1,000 functions at zero: ${r.atZeroError}`);
  return lines.join('\n');
}

/** Cold-start fraction (y) against idle replica-seconds (x), one labelled point per policy. */
export function fleetChartSvg(r: FleetResult): string {
  const [W, H] = [640, 400];
  const pad = { left: 70, right: 40, top: 44, bottom: 56 };
  const pts = r.policies.map((p) => ({ x: p.idleReplicaSeconds, y: p.coldFraction * 100, label: p.policy }));
  const xMax = Math.max(1, ...pts.map((p) => p.x)) * 1.15;
  const yMax = Math.max(1, ...pts.map((p) => p.y)) * 1.25;
  const [pw, ph] = [W - pad.left - pad.right, H - pad.top - pad.bottom];
  const sx = (x: number) => pad.left + (x / xMax) * pw;
  const sy = (y: number) => pad.top + ph - (y / yMax) * ph;
  const colors = ['#1c7ed6', '#7048e8', '#d9480f'];
  const parts = [`<rect width="${W}" height="${H}" fill="white"/>`, `<text x="${pad.left}" y="26" font-size="15" font-weight="bold">Keep-alive: cold starts against memory kept warm for nothing</text>`];
  for (let i = 0; i <= 4; i++) {
    const [x, y] = [(xMax * i) / 4, (yMax * i) / 4];
    parts.push(`<line x1="${sx(x)}" y1="${pad.top}" x2="${sx(x)}" y2="${pad.top + ph}" stroke="#eee"/><text x="${sx(x)}" y="${pad.top + ph + 18}" font-size="11" text-anchor="middle">${Math.round(x)}</text>`);
    parts.push(`<line x1="${pad.left}" y1="${sy(y)}" x2="${pad.left + pw}" y2="${sy(y)}" stroke="#eee"/><text x="${pad.left - 8}" y="${sy(y) + 4}" font-size="11" text-anchor="end">${y.toFixed(1)}</text>`);
  }
  parts.push(`<text x="${pad.left + pw / 2}" y="${H - 14}" font-size="12" text-anchor="middle">idle replica-seconds (lower is better)</text>`);
  parts.push(`<text x="18" y="${pad.top + ph / 2}" font-size="12" text-anchor="middle" transform="rotate(-90 18 ${pad.top + ph / 2})">cold starts, % of requests (lower is better)</text>`);
  pts.forEach((p, i) => {
    parts.push(`<circle cx="${sx(p.x)}" cy="${sy(p.y)}" r="6" fill="${colors[i % colors.length]}"/><text x="${sx(p.x) + 10}" y="${sy(p.y) - 8}" font-size="12">${p.label}</text>`);
  });
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}">${parts.join('')}</svg>\n`;
}
