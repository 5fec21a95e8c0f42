// The chart against the real API server: lint, server-side validation of every profile, schema
// rejections, and a full install/uninstall into the local control plane (kwok runs the pods; no
// image is pulled). Fails, never skips, without helm or a cluster.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { kubectl, kubectlJson, kubectlOk, testNamespace } from '@berth/test/cluster/env';
import { eventually } from '@berth/test/support/eventually';
import { chartDir, DB_URL, helm, helmOk, helmPath, profiles } from './helm.ts';

const CRD = 'dedicatedendpoints.berth.dev';

// Enough of monitoring.coreos.com/v1 ServiceMonitor for the API server to validate the fields the
// chart sets (the real CRD is ~1 MB; this one checks the same field names and types).
const serviceMonitorCrd = `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: { name: servicemonitors.monitoring.coreos.com }
spec:
  group: monitoring.coreos.com
  names: { kind: ServiceMonitor, listKind: ServiceMonitorList, plural: servicemonitors, singular: servicemonitor }
  scope: Namespaced
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec:
              type: object
              required: [endpoints, selector]
              properties:
                selector:
                  type: object
                  properties:
                    matchLabels: { type: object, additionalProperties: { type: string } }
                namespaceSelector:
                  type: object
                  properties:
                    any: { type: boolean }
                    matchNames: { type: array, items: { type: string } }
                endpoints:
                  type: array
                  items:
                    type: object
                    properties:
                      port: { type: string }
                      path: { type: string }
                      interval: { type: string, pattern: '^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$' }
                      scrapeTimeout: { type: string, pattern: '^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$' }
`;

describe('helm lint', () => {
  it('builds or finds helm', () => {
    expect(helmPath()).toMatch(/helm$/);
  });

  for (const [name, args] of Object.entries(profiles)) {
    it(`passes --strict for the ${name} profile`, async () => {
      const r = await helm(['lint', '--strict', chartDir, ...args]);
      expect(r.code, r.stdout + r.stderr).toBe(0);
      expect(r.stdout).toContain('0 chart(s) failed');
    });
  }

  it('passes with values.yaml alone (lint tolerates the required database URL)', async () => {
    const r = await helm(['lint', '--strict', chartDir]);
    expect(r.code, r.stdout + r.stderr).toBe(0);
  });
});

describe('helm template validated by the API server (kubectl apply --dry-run=server)', () => {
  let ns: Awaited<ReturnType<typeof testNamespace>>;
  let endpointsNs: Awaited<ReturnType<typeof testNamespace>>;
  let createdMonitorCrd = false;

  beforeAll(async () => {
    ns = await testNamespace('chart-tpl');
    endpointsNs = await testNamespace('chart-tpl-ep');
    // The dry-run of DedicatedEndpoints-related objects needs nothing more; the CRD itself is in the
    // rendered output (--include-crds) and validated like any other object.
    const exists = await kubectl(['get', 'crd', 'servicemonitors.monitoring.coreos.com']);
    if (exists.code !== 0) {
      await kubectlOk(['apply', '-f', '-'], { input: serviceMonitorCrd });
      createdMonitorCrd = true;
      await kubectlOk(['wait', '--for=condition=Established', 'crd/servicemonitors.monitoring.coreos.com']);
    }
  });

  afterAll(async () => {
    await ns?.remove();
    await endpointsNs?.remove();
    if (createdMonitorCrd)
      await kubectl(['delete', 'crd', 'servicemonitors.monitoring.coreos.com', '--wait=false']);
  });

  for (const [name, profileArgs] of Object.entries(profiles)) {
    it(`accepts every object of the ${name} profile`, async () => {
      const args = profileArgs.map((a) =>
        a === 'endpointsNamespace=berth-endpoints' ? `endpointsNamespace=${endpointsNs.name}` : a,
      );
      const manifest = await helmOk([
        'template',
        'dry',
        chartDir,
        '--namespace',
        ns.name,
        '--include-crds',
        ...args,
      ]);
      const r = await kubectl(['apply', '--dry-run=server', '--validate=strict', '-f', '-'], {
        input: manifest,
        timeoutMs: 60_000,
      });
      expect(r.code, r.stderr).toBe(0);
      const kinds = new Set([...manifest.matchAll(/^kind: (\S+)$/gm)].map((m) => m[1]));
      for (const kind of [
        'CustomResourceDefinition',
        'Deployment',
        'Service',
        'PodDisruptionBudget',
        'Role',
        'RoleBinding',
        'ServiceAccount',
        'ConfigMap',
      ]) {
        expect(kinds, name).toContain(kind);
      }
      // The bundled PostgreSQL: only where a profile asks for it.
      const bundled = args.includes('database.bundled.enabled=true') || name === 'cpu-only';
      expect(kinds.has('StatefulSet'), name).toBe(bundled);
      if (name === 'everything-on') {
        for (const kind of ['Ingress', 'ServiceMonitor']) expect(kinds).toContain(kind);
        expect(manifest).toContain(`namespace: ${endpointsNs.name}`);
      }
      expect(kinds, 'least privilege: no cluster-wide RBAC').not.toContain('ClusterRole');
    });
  }
});

describe("the README's air-gapped image table", () => {
  it("names every image any profile runs (pods and the operator's engine image)", async () => {
    const readme = readFileSync(join(chartDir, 'README.md'), 'utf8');
    const table = readme.slice(
      readme.indexOf('### Air-gapped clusters'),
      readme.indexOf('\n## ', readme.indexOf('### Air-gapped clusters')),
    );
    const appVersion = /^appVersion: '?([^'\n]+)'?$/m.exec(
      readFileSync(join(chartDir, 'Chart.yaml'), 'utf8'),
    )![1]!;
    const images = new Set<string>();
    for (const args of Object.values(profiles)) {
      const manifest = await helmOk(['template', 'img', chartDir, ...args]);
      for (const m of manifest.matchAll(/^\s+image: "?([^"\s]+)"?$/gm)) images.add(m[1]!);
      for (const m of manifest.matchAll(/name: BERTH_ENGINE_IMAGE\s+value: "?([^"\s]+)"?/g))
        images.add(m[1]!);
    }
    expect([...images].sort()).toEqual([
      'ghcr.io/berth-dev/berth-api:' + appVersion,
      'ghcr.io/berth-dev/berth-engine-sim:' + appVersion,
      'ghcr.io/berth-dev/berth-operator:' + appVersion,
      'postgres:17.6',
      'registry.k8s.io/pause:3.10',
      'vllm/vllm-openai:v0.11.0',
    ]);
    for (const image of images)
      expect(table, image).toContain('`' + image.replace(':' + appVersion, ':<appVersion>') + '`');
  });
});

describe('values.schema.json and template checks reject bad values with a clear message', () => {
  // Cases listed here get no database value from the test; every other case gets database.url.
  const ownDatabase = new Set([
    'no database URL',
    'a non-Postgres database URL',
    'a bundled PostgreSQL with a URL-unsafe password',
    'a bundled PostgreSQL with an unknown uninstall policy',
  ]);
  const cases: [string, string[], RegExp][] = [
    [
      'no database URL',
      [],
      /a PostgreSQL URL is required.*database\.url=.*database\.existingSecret\.name.*try-out only.*database\.bundled\.enabled=true/s,
    ],
    [
      'a non-Postgres database URL',
      ['--set', 'database.url=mysql://db/berth'],
      /\/database\/url.*does not match pattern/,
    ],
    [
      'both a database URL and the bundled PostgreSQL',
      ['--set', 'database.bundled.enabled=true'],
      /database\.bundled\.enabled=true and an external database.*are both set; choose one/s,
    ],
    [
      'a bundled PostgreSQL with a URL-unsafe password',
      ['--set', 'database.bundled.enabled=true', '--set', 'database.bundled.password=p@ss/word:0123456789'],
      /\/database\/bundled\/password.*does not match pattern/,
    ],
    [
      'a bundled PostgreSQL with an unknown uninstall policy',
      ['--set', 'database.bundled.enabled=true', '--set', 'database.bundled.persistence.onUninstall=Keep'],
      /\/database\/bundled\/persistence\/onUninstall.*value must be one of/s,
    ],
    [
      'an admin token under 16 characters',
      ['--set', 'adminToken.value=short'],
      /\/adminToken\/value.*minLength: got 5, want 16/s,
    ],
    [
      'a key-hash secret under 32 characters',
      ['--set', 'keyHashSecret.value=0123456789'],
      /\/keyHashSecret\/value.*minLength: got 10, want 32/s,
    ],
    ['zero API replicas', ['--set', 'api.replicaCount=0'], /\/api\/replicaCount.*minimum: got 0, want 1/],
    ['a misspelt key', ['--set', 'api.replicas=3'], /additional properties 'replicas' not allowed/],
    [
      'an unknown model cache',
      ['--set', 'operator.modelCache=s3://bucket'],
      /\/operator\/modelCache.*does not match pattern/,
    ],
    ['a bad log level', ['--set', 'api.logLevel=verbose'], /\/api\/logLevel.*value must be one of/],
    [
      'two operators without leader election',
      ['--set', 'operator.leaderElection.enabled=false', '--set', 'operator.replicaCount=2'],
      /\/operator\/replicaCount.*maximum: got 2, want 1/,
    ],
    [
      'a GPU count outside 1..64',
      [
        '--set',
        'catalog.instanceTypes[0].id=x',
        '--set',
        'catalog.instanceTypes[0].gpuType=X',
        '--set',
        'catalog.instanceTypes[0].gpuMemoryGiB=8',
        '--set',
        'catalog.instanceTypes[0].allowedGpuCounts[0]=0',
      ],
      /allowedGpuCounts\/0.*minimum: got 0, want 1/,
    ],
  ];
  for (const [what, args, message] of cases) {
    it(`rejects ${what}`, async () => {
      const r = await helm([
        'template',
        'bad',
        chartDir,
        ...(ownDatabase.has(what) ? [] : ['--set', `database.url=${DB_URL}`]),
        ...args,
      ]);
      expect(r.code).not.toBe(0);
      expect(r.stderr).toMatch(message);
    });
  }
});

describe('helm install into the local control plane', () => {
  const release = `berth-it-${Date.now().toString(36)}`;
  let ns: Awaited<ReturnType<typeof testNamespace>>;
  // The release name contains "berth", so the chart's prefix is the release name itself.
  const selector = `app.kubernetes.io/instance=${release}`;

  beforeAll(async () => {
    ns = await testNamespace('chart-install');
  });
  afterAll(async () => {
    await helm(['uninstall', release, '--namespace', ns.name, '--ignore-not-found'], { cluster: true });
    await ns?.remove();
  });

  it('installs; API and operator pods run on kwok nodes; the CRD is served; RBAC is scoped; uninstall leaves nothing', async () => {
    await helmOk(
      [
        'install',
        release,
        chartDir,
        '--namespace',
        ns.name,
        '--set',
        `database.url=${DB_URL}`,
        '--wait',
        '--timeout',
        '3m',
      ],
      { cluster: true, timeoutMs: 200_000 },
    );

    // Deployments and their pods: Running and Ready on kwok's fake nodes.
    const kwokNodes = new Set(
      (
        await kubectlJson<{ items: { metadata: { name: string } }[] }>(['get', 'nodes', '-l', 'type=kwok'])
      ).items.map((n) => n.metadata.name),
    );
    for (const [component, replicas] of [
      ['api', 2],
      ['operator', 2],
    ] as const) {
      const dep = await kubectlJson<{ status: { readyReplicas?: number } }>(
        ['get', 'deployment', `${release}-${component}`],
        { namespace: ns.name },
      );
      expect(dep.status.readyReplicas, component).toBe(replicas);
      const pods = await eventually(
        async () => {
          const list = await kubectlJson<{
            items: { spec: { nodeName?: string; serviceAccountName: string }; status: { phase: string } }[];
          }>(['get', 'pods', '-l', `${selector},app.kubernetes.io/component=${component}`], {
            namespace: ns.name,
          });
          if (list.items.length !== replicas || list.items.some((p) => p.status.phase !== 'Running'))
            return false;
          return list.items;
        },
        { description: `${component} pods Running` },
      );
      for (const pod of pods) expect(kwokNodes).toContain(pod.spec.nodeName);
    }

    // The direct wake: the API's BERTH_OPERATOR_URL names the headless Service of the operator's
    // metrics port, and both read the same generated token.
    type Env = { name: string; value?: string; valueFrom?: { secretKeyRef?: { name: string; key: string } } };
    const envOf = async (component: string) =>
      (
        await kubectlJson<{ spec: { template: { spec: { containers: { env: Env[] }[] } } } }>(
          ['get', 'deployment', `${release}-${component}`],
          { namespace: ns.name },
        )
      ).spec.template.spec.containers[0]!.env;
    const [apiEnv, opEnv] = [await envOf('api'), await envOf('operator')];
    expect(apiEnv.find((e) => e.name === 'BERTH_OPERATOR_URL')?.value).toBe(
      `http://${release}-operator-wake.${ns.name}.svc:8080`,
    );
    const tokenRef = apiEnv.find((e) => e.name === 'BERTH_WAKE_TOKEN')?.valueFrom?.secretKeyRef;
    expect(tokenRef).toEqual({ name: release, key: 'wake-token' });
    expect(opEnv.find((e) => e.name === 'BERTH_WAKE_TOKEN')?.valueFrom?.secretKeyRef).toEqual(tokenRef);
    const wakeSecret = await kubectlJson<{ data: Record<string, string> }>(['get', 'secret', release], {
      namespace: ns.name,
    });
    expect(Buffer.from(wakeSecret.data['wake-token']!, 'base64').toString()).toMatch(/^[A-Za-z0-9]{40}$/);
    const wakeSvc = await kubectlJson<{
      spec: { clusterIP: string; ports: { name: string; port: number }[] };
    }>(['get', 'service', `${release}-operator-wake`], { namespace: ns.name });
    expect(wakeSvc.spec.clusterIP).toBe('None');
    expect(wakeSvc.spec.ports).toMatchObject([{ name: 'wake', port: 8080 }]);

    // The CRD is established and its resources are served.
    await kubectlOk(['wait', '--for=condition=Established', `crd/${CRD}`, '--timeout=30s']);
    await kubectlOk(['get', 'dedicatedendpoints', '--namespace', ns.name]);

    // Least privilege: the Roles act in the endpoints namespace only.
    const can = async (sa: string, verb: string, resource: string, namespace: string) =>
      (
        await kubectl([
          'auth',
          'can-i',
          verb,
          resource,
          '--namespace',
          namespace,
          `--as=system:serviceaccount:${ns.name}:${release}-${sa}`,
        ])
      ).stdout.trim();
    expect(await can('api', 'create', 'dedicatedendpoints.berth.dev', ns.name)).toBe('yes');
    expect(await can('api', 'get', 'pods/log', ns.name)).toBe('yes');
    expect(await can('api', 'create', 'deployments.apps', ns.name)).toBe('no');
    expect(await can('api', 'get', 'secrets', ns.name)).toBe('no');
    expect(await can('api', 'create', 'secrets', ns.name)).toBe('yes');
    expect(await can('api', 'list', 'secrets', ns.name)).toBe('no');
    expect(await can('api', 'list', 'dedicatedendpoints.berth.dev', 'default')).toBe('no');
    expect(await can('operator', 'patch', 'dedicatedendpoints.berth.dev/status', ns.name)).toBe('yes');
    expect(await can('operator', 'update', 'dedicatedendpoints.berth.dev/finalizers', ns.name)).toBe('yes');
    expect(await can('operator', 'patch', 'deployments.apps', ns.name)).toBe('yes');
    expect(await can('operator', 'update', 'leases.coordination.k8s.io/berth-operator', ns.name)).toBe('yes');
    expect(await can('operator', 'update', 'leases.coordination.k8s.io/someone-elses', ns.name)).toBe('no');
    expect(await can('operator', 'list', 'deployments.apps', 'default')).toBe('no');

    // The generated secrets meet the API's minimums.
    const secret = await kubectlJson<{ data: Record<string, string> }>(['get', 'secret', release], {
      namespace: ns.name,
    });
    const decode = (k: string) => Buffer.from(secret.data[k] ?? '', 'base64').toString();
    expect(decode('database-url')).toBe(DB_URL);
    expect(decode('admin-token').length).toBeGreaterThanOrEqual(16);
    expect(decode('key-hash-secret').length).toBeGreaterThanOrEqual(32);

    // An upgrade keeps the generated secrets (API keys stay valid).
    await helmOk(
      [
        'upgrade',
        release,
        chartDir,
        '--namespace',
        ns.name,
        '--reuse-values',
        '--set',
        'api.logLevel=debug',
        '--wait',
        '--timeout',
        '3m',
      ],
      { cluster: true, timeoutMs: 200_000 },
    );
    const after = await kubectlJson<{ data: Record<string, string> }>(['get', 'secret', release], {
      namespace: ns.name,
    });
    expect(after.data['admin-token']).toBe(secret.data['admin-token']);
    expect(after.data['key-hash-secret']).toBe(secret.data['key-hash-secret']);
    expect(after.data['wake-token']).toBe(secret.data['wake-token']);

    await helmOk(['uninstall', release, '--namespace', ns.name, '--wait', '--timeout', '2m'], {
      cluster: true,
      timeoutMs: 150_000,
    });

    // Nothing carrying the release label is left, of any listable kind, in any namespace.
    const kinds = (await kubectlOk(['api-resources', '--verbs=list', '-o', 'name']))
      .trim()
      .split('\n')
      .filter((k) => k && !k.startsWith('events'));
    await eventually(
      async () => {
        const left = await kubectlOk(
          ['get', kinds.join(','), '--all-namespaces', '-l', selector, '-o', 'name', '--ignore-not-found'],
          { timeoutMs: 60_000 },
        );
        if (left.trim()) throw new Error(`left behind:\n${left}`);
      },
      { description: 'no object with the release label', timeout: 60_000 },
    );
    const releaseRecords = await kubectlOk(
      ['get', 'secrets', '-l', `owner=helm,name=${release}`, '-o', 'name'],
      { namespace: ns.name },
    );
    expect(releaseRecords.trim()).toBe('');
    // Helm never deletes CRDs it installed from crds/ (deleting one deletes every endpoint): by design.
    await kubectlOk(['get', 'crd', CRD]);
  }, 600_000);
});
