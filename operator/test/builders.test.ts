import type { DedicatedEndpoint } from '@berth/crds';
import { DEFAULT_CATALOG, DedicatedEndpointSpecSchema, LABEL_SPEC_HASH } from '@berth/crds';
import { describe, expect, it } from 'vitest';
import type { BuildConfig } from '../src/k8s/builders.ts';
import {
  desiredCacheClaim,
  desiredDeployment,
  desiredInferencePool,
  desiredService,
  serviceUrl,
} from '../src/k8s/builders.ts';

const h100 = DEFAULT_CATALOG.instanceTypes.find((t) => t.id === 'nvidia-h100-80gb')!;
const config: BuildConfig = {
  engineImage: 'vllm/vllm-openai:v0.11.0',
  startupTimeoutSeconds: 1800,
  drainSeconds: 10,
  terminationGracePeriodSeconds: 120,
  modelCache: { kind: 'hostPath', path: '/var/lib/berth/hf-cache' },
};

function endpoint(spec: Record<string, unknown> = {}): DedicatedEndpoint {
  return {
    apiVersion: 'berth.dev/v1alpha1',
    kind: 'DedicatedEndpoint',
    metadata: { name: 'endpt-abc123', namespace: 'team-a', uid: '0000-1111', generation: 1 },
    spec: DedicatedEndpointSpecSchema.parse({
      account: 'acct_42',
      model: {
        id: 'meta-llama/Llama-3.1-70B-Instruct',
        hubTokenSecretRef: { name: 'hf' },
        maxModelLen: 8192,
      },
      hardware: { gpuType: 'nvidia-h100-80gb', gpuCount: 4 },
      ...spec,
    }),
  };
}

describe('desiredDeployment', () => {
  it('matches the snapshot', () => {
    expect(desiredDeployment(endpoint(), h100, config, 1)).toMatchSnapshot();
  });

  it('applies engine overrides: image, extra args, env, pod annotations', () => {
    const d = desiredDeployment(
      endpoint({
        engine: {
          image: 'berth/engine-sim:dev',
          args: ['--enable-prefix-caching'],
          env: [{ name: 'SIM_TTFT_MS', value: '50' }],
          podAnnotations: { 'sim.berth.dev/ready-after': '3s' },
        },
      }),
      h100,
      config,
      2,
    );
    const c = d.spec!.template.spec!.containers[0]!;
    expect(c.image).toBe('berth/engine-sim:dev');
    expect(c.args!.at(-1)).toBe('--enable-prefix-caching');
    expect(c.env).toContainEqual({ name: 'SIM_TTFT_MS', value: '50' });
    expect(d.spec!.template.metadata!.annotations).toEqual({ 'sim.berth.dev/ready-after': '3s' });
    expect(d.spec!.replicas).toBe(2);
  });

  it('changes the spec hash when the spec changes, not when replicas do', () => {
    const a = desiredDeployment(endpoint(), h100, config, 1).metadata!.labels![LABEL_SPEC_HASH];
    const b = desiredDeployment(endpoint(), h100, config, 3).metadata!.labels![LABEL_SPEC_HASH];
    const c = desiredDeployment(
      endpoint({ hardware: { gpuType: 'nvidia-h100-80gb', gpuCount: 8 } }),
      h100,
      config,
      1,
    ).metadata!.labels![LABEL_SPEC_HASH];
    expect(a).toBe(b);
    expect(a).not.toBe(c);
  });

  it('mounts a per-endpoint claim when the cache is a PVC', () => {
    const pvc = { kind: 'pvc', sizeGiB: 200, accessMode: 'ReadWriteOnce' } as const;
    const d = desiredDeployment(endpoint(), h100, { ...config, modelCache: pvc }, 1);
    expect(d.spec!.template.spec!.volumes![0]).toEqual({
      name: 'model-cache',
      persistentVolumeClaim: { claimName: 'endpt-abc123-cache' },
    });
    expect(desiredCacheClaim(endpoint(), pvc)).toMatchSnapshot();
  });
});

describe('desiredService', () => {
  it('matches the snapshot and exposes the in-cluster URL', () => {
    expect(desiredService(endpoint())).toMatchSnapshot();
    expect(serviceUrl(endpoint())).toBe('http://endpt-abc123.team-a.svc:8000');
  });
});

describe('model sources in the Deployment', () => {
  const engine = (source: string, extra: Record<string, unknown> = {}) =>
    desiredDeployment(endpoint({ model: { id: 'org/m', source, ...extra } }), h100, config, 1).spec!.template
      .spec!;

  it('oci:// mounts the image as a read-only image volume at /models', () => {
    const pod = engine('oci://registry.example.com/weights/m:v1');
    expect(pod.volumes).toContainEqual({
      name: 'model-source',
      image: { reference: 'registry.example.com/weights/m:v1', pullPolicy: 'IfNotPresent' },
    });
    expect(pod.containers[0]!.volumeMounts).toContainEqual({
      name: 'model-source',
      mountPath: '/models',
      readOnly: true,
    });
    expect(pod.containers[0]!.args?.slice(0, 4)).toEqual([
      '--model',
      '/models',
      '--served-model-name',
      'org/m',
    ]);
    expect(pod.containers[0]!.args).not.toContain('--revision');
  });

  it('file:// mounts the node directory (it must exist: type Directory)', () => {
    expect(engine('file:///data/weights/m').volumes).toContainEqual({
      name: 'model-source',
      hostPath: { path: '/data/weights/m', type: 'Directory' },
    });
  });

  it('s3:// hands the URI to vLLM’s streamer with the credentials Secret as environment', () => {
    const c = engine('s3://bucket/m', { credentialsSecretRef: { name: 's3' } }).containers[0]!;
    expect(c.args?.slice(0, 2)).toEqual(['--model', 's3://bucket/m']);
    expect(c.args?.join(' ')).toContain('--load-format runai_streamer');
    expect(c.envFrom).toEqual([{ secretRef: { name: 's3' } }]);
  });

  it('the schema refuses malformed sources with the field’s message', () => {
    for (const bad of [
      'ftp://x/y',
      'pvc://Bad_Claim/x',
      's3://',
      'oci://image-without-registry',
      'relative/path',
    ]) {
      const r = DedicatedEndpointSpecSchema.safeParse({
        account: 'a',
        model: { id: 'org/m', source: bad },
        hardware: { gpuType: 'nvidia-h100-80gb', gpuCount: 1 },
      });
      expect(r.success, bad).toBe(false);
      expect(r.error?.issues[0]?.message, bad).toMatch(/^spec\.model\.source must be pvc:\/\//);
    }
  });
});

describe('engine tracing', () => {
  it('passes --otlp-traces-endpoint and the protocol to vLLM when configured, nothing otherwise', () => {
    const container = (c: BuildConfig) =>
      desiredDeployment(endpoint(), h100, c, 1).spec!.template.spec!.containers[0]!;
    const off = container(config);
    expect(off.args).not.toContain('--otlp-traces-endpoint');
    expect(off.env!.map((e) => e.name)).not.toContain('OTEL_EXPORTER_OTLP_TRACES_PROTOCOL');
    const on = container({
      ...config,
      engineTracing: { endpoint: 'http://otel-collector:4318/v1/traces', protocol: 'http/protobuf' },
    });
    const at = on.args!.indexOf('--otlp-traces-endpoint');
    expect(on.args![at + 1]).toBe('http://otel-collector:4318/v1/traces');
    expect(on.env).toContainEqual({ name: 'OTEL_EXPORTER_OTLP_TRACES_PROTOCOL', value: 'http/protobuf' });
  });
});

describe('the engine’s compile caches', () => {
  const env = (spec: Record<string, unknown> = {}, image = config.engineImage) =>
    Object.fromEntries(
      desiredDeployment(
        endpoint(spec),
        h100,
        { ...config, engineImage: image },
        1,
      ).spec!.template.spec!.containers[0]!.env!.map((e) => [e.name, e.value]),
    );

  it('live on the node’s cache volume, keyed by engine image, model and hardware', () => {
    const base = env();
    for (const name of ['VLLM_CACHE_ROOT', 'TORCHINDUCTOR_CACHE_DIR', 'TRITON_CACHE_DIR'])
      expect(base[name]).toMatch(/^\/root\/\.cache\/huggingface\/berth-engine-cache\/[0-9a-f]{16}\//);
    const key = (e: Record<string, string | undefined>) => e.VLLM_CACHE_ROOT!.split('/')[5];
    expect(key(env())).toBe(key(base)); // stable
    expect(key(env({}, 'vllm/vllm-openai:v0.12.0'))).not.toBe(key(base));
    expect(key(env({ model: { id: 'Qwen/Qwen2.5-7B-Instruct' } }))).not.toBe(key(base));
    expect(key(env({ hardware: { gpuType: 'nvidia-h100-80gb', gpuCount: 2 } }))).not.toBe(key(base));
  });
});

describe('desiredInferencePool', () => {
  const picker = { service: '{name}-epp', port: 9002 };

  it('selects the engine pods on the engine port, with the default picker named after the endpoint', () => {
    const pool = desiredInferencePool(endpoint(), picker);
    expect(pool.apiVersion).toBe('inference.networking.k8s.io/v1');
    expect(pool.metadata).toMatchObject({ name: 'endpt-abc123', namespace: 'team-a' });
    expect(pool.metadata!.ownerReferences).toEqual([
      expect.objectContaining({ kind: 'DedicatedEndpoint', name: 'endpt-abc123', controller: true }),
    ]);
    expect(pool.spec).toEqual({
      selector: { matchLabels: desiredService(endpoint()).spec!.selector },
      targetPorts: [{ number: 8000 }],
      endpointPickerRef: {
        kind: 'Service',
        name: 'endpt-abc123-epp',
        port: { number: 9002 },
        failureMode: 'FailClose',
      },
    });
  });

  it('takes the picker the spec names, and a new picker is a new spec hash', () => {
    const named = endpoint({
      inferencePool: {
        enabled: true,
        endpointPicker: { name: 'shared', port: 9100, failureMode: 'FailOpen' },
      },
    });
    const pool = desiredInferencePool(named, picker);
    expect(pool.spec.endpointPickerRef).toEqual({
      kind: 'Service',
      name: 'shared',
      port: { number: 9100 },
      failureMode: 'FailOpen',
    });
    expect(pool.metadata!.labels![LABEL_SPEC_HASH]).not.toBe(
      desiredInferencePool(endpoint(), picker).metadata!.labels![LABEL_SPEC_HASH],
    );
  });
});
