// The engine contract checked against vLLM itself, not against the simulator: every option the
// operator gives an engine, every `vllm:` metric the operator, the API and the chart read, every
// engine route they call, against the extract of the pinned release's source in
// fixtures/vllm-<version>/ (docs/vllm.md: where it comes from and how to move the pin).
import { readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { DedicatedEndpoint } from '@berth/crds';
import { DEFAULT_CATALOG, DedicatedEndpointSpecSchema, parseModelSource } from '@berth/crds';
import { describe, expect, it } from 'vitest';
import { DEFAULT_ENGINE_IMAGE } from '../src/config.ts';
import { engineArgs } from '../src/core/engine-args.ts';
import type { BuildConfig } from '../src/k8s/builders.ts';
import { desiredDeployment } from '../src/k8s/builders.ts';

const repo = fileURLToPath(new URL('../../', import.meta.url));
// The pin: the tag of the default engine image (a fixtures directory per pinned release).
const version = /^vllm\/vllm-openai:v(\d+\.\d+\.\d+)$/.exec(DEFAULT_ENGINE_IMAGE)?.[1] ?? 'unpinned';
const fixtures = path.join(repo, 'operator/test/fixtures', `vllm-${version}`);
const rows = (file: string) =>
  readFileSync(path.join(fixtures, file), 'utf8')
    .split('\n')
    .filter((l) => l !== '' && !l.startsWith('#'))
    .map((l) => l.split(' '));

const flags = new Map(rows('flags.txt').map(([name, values]) => [name!, values!]));
const metrics = new Map(
  rows('metrics.txt').map(([family, type, samples, ...condition]) => [
    family!,
    { type: type!, samples: samples!.split(','), condition: condition.join(' ') },
  ]),
);
const routes = rows('routes.txt').map(([method, route, ...condition]) => ({
  method: method!,
  route: route!,
  condition: condition.join(' '),
}));
const image = new Map(rows('image.txt').map(([key, ...value]) => [key!, value.join(' ')]));

/**
 * What vLLM's parser makes of a command line (argparse, with the option table of flags.txt): the
 * options it refuses, spelled as the operator spelled them, and the positional arguments.
 */
function parse(args: readonly string[]): { refused: string[]; positionals: string[] } {
  const refused: string[] = [];
  const positionals: string[] = [];
  const isValue = (a: string | undefined): boolean =>
    a !== undefined && (!a.startsWith('-') || /^-\d/.test(a));
  for (let i = 0; i < args.length; i++) {
    const arg = args[i]!;
    if (isValue(arg)) {
      positionals.push(arg);
      continue;
    }
    const eq = arg.startsWith('--') ? arg.indexOf('=') : -1;
    const name = eq === -1 ? arg : arg.slice(0, eq);
    const values = flags.get(name);
    if (values === undefined) {
      refused.push(`${name}: vLLM v${version} has no such option`);
      continue;
    }
    if (eq !== -1) {
      if (values === '0') refused.push(`${name}: takes no value`);
    } else if (values === '1' || values === '+') {
      if (!isValue(args[i + 1])) refused.push(`${name}: needs a value`);
      else i++;
      while (values === '+' && isValue(args[i + 1])) i++;
    } else if (values === '?' && isValue(args[i + 1])) i++;
  }
  return { refused, positionals };
}

const h100 = DEFAULT_CATALOG.instanceTypes.find((t) => t.id === 'nvidia-h100-80gb')!;
const build: BuildConfig = {
  engineImage: DEFAULT_ENGINE_IMAGE,
  startupTimeoutSeconds: 1800,
  drainSeconds: 10,
  terminationGracePeriodSeconds: 120,
  modelCache: { kind: 'hostPath', path: '/var/lib/berth/hf-cache' },
};

function endpoint(model: Record<string, unknown>, gpuCount: number): DedicatedEndpoint {
  return {
    apiVersion: 'berth.dev/v1alpha1',
    kind: 'DedicatedEndpoint',
    metadata: { name: 'endpt-contract', namespace: 'team-a', uid: 'u', generation: 1 },
    spec: DedicatedEndpointSpecSchema.parse({
      account: 'acct_1',
      model: { id: 'org/model', ...model },
      hardware: { gpuType: h100.id, gpuCount },
    }),
  };
}

// Every spec field that becomes an option of the engine: the model (hub with its revision, or a
// source: pvc, node path, s3 with the Run:ai streamer, an OCI image volume), the GPU count (the
// tensor-parallel size), the context length, and the operator's OTLP endpoint.
const models: Record<string, unknown>[] = [
  {},
  { revision: '0123abc' },
  { source: 'pvc://weights/org/model' },
  { source: 'file:///data/weights/m' },
  { source: '/data/weights/m' },
  { source: 's3://bucket/prefix', credentialsSecretRef: { name: 's3' } },
  { source: 'oci://registry.example.com/weights/m:v1' },
];
const cases = models.flatMap((model) =>
  [1, 2, 4, 8].flatMap((gpus) =>
    [undefined, 8192, 131072].flatMap((maxModelLen) =>
      [false, true].map((tracing) => ({
        name: `${JSON.stringify(model)} gpus=${gpus} maxModelLen=${maxModelLen} tracing=${tracing}`,
        ep: endpoint({ ...model, ...(maxModelLen ? { maxModelLen } : {}) }, gpus),
        tracing,
      })),
    ),
  ),
);
const tracingConfig = {
  endpoint: 'http://otel-collector:4318/v1/traces',
  protocol: 'http/protobuf' as const,
};

describe(`the vLLM contract, against vLLM v${version} (fixtures/vllm-${version})`, () => {
  it('pins the version the chart and the operator run, and has its extract', () => {
    expect(DEFAULT_ENGINE_IMAGE).toBe(`vllm/vllm-openai:v${version}`);
    const values = readFileSync(path.join(repo, 'charts/berth/values.yaml'), 'utf8');
    expect(/^\s+engineImage: (\S+)$/m.exec(values)?.[1]).toBe(DEFAULT_ENGINE_IMAGE);
    for (const file of ['flags.txt', 'metrics.txt', 'routes.txt', 'image.txt'])
      expect(readFileSync(path.join(fixtures, file), 'utf8')).toMatch(
        new RegExp(`^# vLLM v${version.replaceAll('.', '\\.')}: .*\\n# source: .*commit [0-9a-f]{40}\\n`),
      );
    expect(flags.size).toBeGreaterThan(200);
    expect(flags.get('--tensor-parallel-size')).toBe('1');
  });

  it('the checker refuses what vLLM refuses (the checks can fail)', () => {
    expect(parse(['--model', 'm', '--tensor-paralel-size', '2']).refused).toEqual([
      `--tensor-paralel-size: vLLM v${version} has no such option`,
    ]);
    expect(parse(['--max-model-len']).refused).toEqual(['--max-model-len: needs a value']);
    expect(parse(['--enforce-eager=true']).refused).toEqual(['--enforce-eager: takes no value']);
    expect(parse(['m', '--served-model-name', 'a', 'b', '--enable-lora']).positionals).toEqual(['m']);
  });

  it(`every pod the operator builds (${cases.length} specs) passes only options vLLM has, the model by --model`, () => {
    // The image runs its ENTRYPOINT with the pod's args; if that program ignores a positional
    // model (v0.11.0: python3 -m vllm.entrypoints.openai.api_server), only --model names it.
    const positional = image.get('positional-model');
    expect(['read', 'ignored']).toContain(positional);
    for (const { name, ep, tracing } of cases) {
      const config = tracing ? { ...build, engineTracing: tracingConfig } : build;
      const args = desiredDeployment(ep, h100, config, 1).spec!.template.spec!.containers[0]!.args!;
      const { refused, positionals } = parse(args);
      expect(refused, name).toEqual([]);
      if (positional === 'ignored') expect(positionals, name).toEqual([]);
      const model = args.indexOf('--model');
      expect(model, name).toBeGreaterThanOrEqual(0);
      expect(args.includes('--otlp-traces-endpoint'), name).toBe(tracing);
      expect(args.includes('--max-model-len'), name).toBe(ep.spec.model.maxModelLen !== undefined);
      expect(args[args.indexOf('--tensor-parallel-size') + 1], name).toBe(String(ep.spec.hardware.gpuCount));
      if (parseModelSource(ep.spec.model.source).kind === 's3')
        expect(flags.has('--load-format') && args.includes('--load-format'), name).toBe(true);
    }
  });

  it('local mode runs `vllm serve` with the model as its one positional argument (--model refused there)', () => {
    for (const { name, ep } of cases) {
      const source = parseModelSource(ep.spec.model.source);
      const args = engineArgs(ep, source.kind === 'path' ? source.path : undefined);
      const { refused, positionals } = parse(args);
      expect(refused, name).toEqual([]);
      expect(positionals, name).toHaveLength(1);
      expect(args, name).not.toContain('--model');
    }
  });

  it('every vllm: metric the operator, the API and the chart read is one vLLM exports unconditionally', () => {
    const sources = ['operator/src', 'apps/api/src', 'charts/berth/templates', 'charts/berth/dashboards'];
    const read = new Map<string, string>();
    const walk = (dir: string) => {
      for (const entry of readdirSync(path.join(repo, dir))) {
        const rel = path.join(dir, entry);
        if (statSync(path.join(repo, rel)).isDirectory()) walk(rel);
        else
          for (const [name] of readFileSync(path.join(repo, rel), 'utf8').matchAll(/vllm:[a-zA-Z0-9_:]+/g))
            read.set(name, rel);
      }
    };
    for (const dir of sources) walk(dir);
    // the API's load signal (engine-load.ts) is among them: the scan finds what it must
    expect([...read.keys()]).toEqual(
      expect.arrayContaining(['vllm:num_requests_running', 'vllm:num_requests_waiting']),
    );
    const samples = new Map([...metrics].flatMap(([family, m]) => [family, ...m.samples].map((s) => [s, m])));
    for (const [name, file] of read) {
      const m = samples.get(name);
      expect(m, `${name} (${file}) is not a metric of vLLM v${version}`).toBeDefined();
      expect(m!.condition, `${name} (${file}) is exported only when ${m!.condition}`).toBe('');
    }
  });

  it('every engine route the operator and the API call is one vLLM serves unconditionally', () => {
    const text = (file: string) => readFileSync(path.join(repo, file), 'utf8');
    const called: { method: string; route: string; by: string }[] = [];
    // the operator's probes
    for (const [, p] of text('operator/src/k8s/builders.ts').matchAll(/httpGet: \{ path: '([^']+)'/g))
      called.push({ method: 'GET', route: p!, by: 'operator/src/k8s/builders.ts' });
    // the API's load scrape
    if (text('apps/api/src/dedicated/upstream/engine-load.ts').includes("'/metrics'"))
      called.push({ method: 'GET', route: '/metrics', by: 'apps/api/src/dedicated/upstream/engine-load.ts' });
    // the OpenAI routes the API forwards, under the engine's /v1 (endpoint-upstream.ts)
    expect(text('apps/api/src/dedicated/upstream/endpoint-upstream.ts')).toContain(
      "const OPENAI_PATH = '/v1';",
    );
    for (const file of ['apps/api/src/inference/routes.ts', 'apps/api/src/inference/dedicated-routes.ts'])
      for (const [, p] of text(file).matchAll(/upstreamPath: '([^']+)'/g))
        called.push({ method: p === '/models' ? 'GET' : 'POST', route: '/v1' + p, by: file });
    expect(called.map((c) => `${c.method} ${c.route}`)).toEqual(
      expect.arrayContaining(['GET /health', 'GET /metrics', 'POST /v1/chat/completions', 'GET /v1/models']),
    );
    for (const c of called) {
      const served = routes.find((r) => r.method === c.method && r.route === c.route);
      expect(served, `${c.method} ${c.route} (${c.by}) is not a route of vLLM v${version}`).toBeDefined();
      expect(served!.condition, `${c.method} ${c.route} (${c.by})`).toBe('');
    }
  });
});
