// The chart's monitoring: the PrometheusRule rendered with the alerts on, its rules checked by
// promtool (built from Prometheus's Go module, charts/scripts/ensure-promtool.sh), and every metric
// the rules and the Grafana dashboard name read off `/metrics` of a running API and operator — a
// rule on a metric Berth does not export would never fire.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseAllDocuments, stringify } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { testNamespace } from '@berth/test/cluster/env';
import { startTestApi, type TestApi } from '@berth/test/support/api';
import { startFakeHub } from '@berth/test/support/fake-hub';
import { installCrd, start, testConfig } from '@berth/test/support/operator';
import type { OperatorHandle } from '@berth/operator';
import { chartDir, DB_URL, helmOk } from './helm.ts';

const here = dirname(fileURLToPath(import.meta.url));
const ensurePromtool = join(here, '..', 'scripts', 'ensure-promtool.sh');

interface Rule {
  alert: string;
  expr: string;
  annotations: Record<string, string>;
}

let rules: { groups: { name: string; rules: Rule[] }[] };
let api: TestApi;
let op: OperatorHandle;
let ns: Awaited<ReturnType<typeof testNamespace>>;
let hub: Awaited<ReturnType<typeof startFakeHub>>;

beforeAll(async () => {
  const out = await helmOk([
    'template',
    'berth',
    chartDir,
    '--set',
    `database.url=${DB_URL}`,
    '--set',
    'prometheusRule.enabled=true',
    '--set',
    'serviceMonitor.enabled=true',
    '--set',
    'grafanaDashboard.enabled=true',
  ]);
  const rule = parseAllDocuments(out)
    .map((d) => d.toJS() as { kind?: string; spec?: typeof rules })
    .find((d) => d?.kind === 'PrometheusRule');
  if (!rule?.spec) throw new Error('no PrometheusRule rendered');
  rules = rule.spec;
  await installCrd();
  ns = await testNamespace('monitoring');
  hub = await startFakeHub();
  [api, op] = await Promise.all([
    startTestApi(),
    start(testConfig(ns.name, hub.url, { leaderElection: false })),
  ]);
}, 30 * 60_000);

afterAll(async () => {
  await op?.stop();
  await api?.stop();
  await hub?.close();
  await ns?.remove();
});

/** Metric names in PromQL (the histogram series suffixes folded into their metric). */
function metricsIn(expr: string): string[] {
  return [...expr.matchAll(/\bberth_[a-z_]+\b/g)].map((m) => m[0].replace(/_(bucket|sum|count)$/, ''));
}

describe('the chart’s alerts', () => {
  it(
    'pass promtool check rules',
    () => {
      const promtool = execFileSync('bash', [ensurePromtool], {
        encoding: 'utf8',
        stdio: ['ignore', 'pipe', 'inherit'],
        timeout: 30 * 60_000,
      })
        .trim()
        .split('\n')
        .at(-1)!;
      const file = join(mkdtempSync(join(tmpdir(), 'berth-rules-')), 'rules.yaml');
      writeFileSync(file, stringify(rules));
      const out = execFileSync(promtool, ['check', 'rules', file], { encoding: 'utf8' });
      expect(out).toContain('SUCCESS');
      expect(rules.groups.flatMap((g) => g.rules.map((r) => r.alert)).sort()).toEqual([
        'BerthChronosFireDelay',
        'BerthEndpointFailed',
        'BerthOperatorNoLeader',
        'BerthOperatorReconcileErrors',
        'BerthPaymentRequiredRate',
        'BerthProxy5xxRate',
        'BerthWakeSlow',
        'BerthWalletFlushFailing',
      ]);
    },
    30 * 60_000,
  ); // promtool is built on first use where .ci/run has not built it

  it('each links its runbook paragraph in docs/alerts.md', () => {
    const doc = readFileSync(join(here, '..', '..', 'docs', 'alerts.md'), 'utf8');
    for (const r of rules.groups.flatMap((g) => g.rules)) {
      expect(r.annotations.runbook_url).toMatch(new RegExp(`docs/alerts\\.md#${r.alert.toLowerCase()}$`));
      expect(doc, r.alert).toContain(`\n## ${r.alert}\n`);
    }
  });

  it('name only metrics a running API and operator export, as does the dashboard', async () => {
    const exported = new Set<string>();
    for (const url of [`${api.url}/metrics`, `http://127.0.0.1:${op.metricsPort}/metrics`]) {
      const text = await (await fetch(url)).text();
      for (const m of text.matchAll(/^# TYPE (\S+) /gm)) exported.add(m[1]!);
    }
    const dashboard = JSON.parse(readFileSync(join(chartDir, 'dashboards', 'berth.json'), 'utf8')) as {
      panels: { title: string; targets?: { expr: string }[] }[];
    };
    const named = new Map<string, string>();
    for (const r of rules.groups.flatMap((g) => g.rules))
      for (const m of metricsIn(r.expr)) named.set(m, `alert ${r.alert}`);
    for (const p of dashboard.panels)
      for (const t of p.targets ?? []) for (const m of metricsIn(t.expr)) named.set(m, `panel ${p.title}`);
    expect(named.size).toBeGreaterThan(5);
    const missing = [...named].filter(([m]) => !exported.has(m)).map(([m, where]) => `${m} (${where})`);
    expect(missing).toEqual([]);
  });
});
