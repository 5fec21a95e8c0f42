import type { DedicatedEndpoint } from '@berth/crds';
import { DEFAULT_CATALOG, DedicatedEndpointSpecSchema } from '@berth/crds';
import { describe, expect, it } from 'vitest';
import { desiredDeployment, desiredService } from '../src/k8s/builders.ts';
import { driftOf, scaleOnly } from '../src/k8s/drift.ts';

const h100 = DEFAULT_CATALOG.instanceTypes.find((t) => t.id === 'nvidia-h100-80gb')!;
const ep: DedicatedEndpoint = {
  apiVersion: 'berth.dev/v1alpha1',
  kind: 'DedicatedEndpoint',
  metadata: { name: 'endpt-drift', namespace: 'team-a', uid: 'u-1', generation: 1 },
  spec: DedicatedEndpointSpecSchema.parse({
    account: 'acct_1',
    model: { id: 'org/small' },
    hardware: { gpuType: 'nvidia-h100-80gb', gpuCount: 1 },
  }),
};
const build = {
  engineImage: 'vllm/vllm-openai:v0.11.0',
  startupTimeoutSeconds: 600,
  drainSeconds: 1,
  terminationGracePeriodSeconds: 5,
  modelCache: { kind: 'emptyDir' as const },
};

/** What the API server returns for what we applied: defaults filled in, other managers' fields added. */
function asServed<T>(o: T): T {
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- a test double of a served object, mutated freely
  const live = structuredClone(o) as Record<string, any>;
  live.metadata.uid = 'live-uid';
  live.metadata.resourceVersion = '42';
  live.metadata.managedFields = [{ manager: 'berth-operator', operation: 'Apply' }];
  live.metadata.annotations = { 'deployment.kubernetes.io/revision': '1' };
  if (live.kind === 'Service') {
    live.spec.clusterIP = '10.0.0.12';
    live.spec.sessionAffinity = 'None';
  } else {
    live.spec.revisionHistoryLimit = 10;
    live.spec.progressDeadlineSeconds = 600;
    const pod = live.spec.template.spec;
    pod.restartPolicy = 'Always';
    pod.dnsPolicy = 'ClusterFirst';
    for (const c of pod.containers) {
      c.imagePullPolicy = 'IfNotPresent';
      c.terminationMessagePath = '/dev/termination-log';
      c.startupProbe.timeoutSeconds = 1;
      c.startupProbe.httpGet.scheme = 'HTTP';
    }
    // A sidecar someone else added through their own apply is their field, not drift.
    pod.containers.push({ name: 'log-shipper', image: 'fluent-bit:3' });
  }
  live.status = { observedGeneration: 1 };
  return live as T;
}

describe('driftOf', () => {
  const dep = desiredDeployment(ep, h100, build, 1);
  const svc = desiredService(ep);

  it('sees no drift when the live object holds every field we apply (server defaults and others’ fields aside)', () => {
    expect(driftOf(dep, asServed(dep))).toBeUndefined();
    expect(driftOf(svc, asServed(svc))).toBeUndefined();
  });

  it('names a missing object', () => {
    expect(driftOf(svc, undefined)).toBe('missing');
  });

  it('names the field a hand edit changed: replicas, image, a port, a label, a removed env var', () => {
    const scaled = asServed(dep);
    scaled.spec!.replicas = 3;
    expect(driftOf(dep, scaled)).toBe('.spec.replicas');

    const image = asServed(dep);
    image.spec!.template.spec!.containers[0]!.image = 'vllm/vllm-openai:latest';
    expect(driftOf(dep, image)).toBe('.spec.template.spec.containers[engine].image');

    const port = asServed(svc);
    port.spec!.ports![0]!.port = 9000;
    expect(driftOf(svc, port)).toBe('.spec.ports[http].port');

    const label = asServed(svc);
    delete label.metadata!.labels!['berth.dev/endpoint'];
    expect(driftOf(svc, label)).toBe('.labels.berth.dev/endpoint');

    const env = asServed(dep);
    env.spec!.template.spec!.containers[0]!.env = [];
    expect(driftOf(dep, env)).toBe('.spec.template.spec.containers[engine].env[HF_HOME]');
  });

  it('treats unnamed lists as atomic (an extra toleration or owner is drift in a list we own)', () => {
    const tol = asServed(dep);
    tol.spec!.template.spec!.tolerations!.push({ key: 'x', operator: 'Exists' });
    expect(driftOf(dep, tol)).toBe('.spec.template.spec.tolerations');
  });
});

describe('scaleOnly', () => {
  it('is true when the replica count is all that departs (a wake or a hibernation), else false', () => {
    const asleep = asServed(desiredDeployment(ep, h100, build, 0));
    // A wake: 0 → 1 with everything else as applied (server defaults and others' fields aside).
    expect(scaleOnly(desiredDeployment(ep, h100, build, 1), asleep)).toBe(true);
    // Nothing to scale.
    expect(scaleOnly(desiredDeployment(ep, h100, build, 0), asleep)).toBe(false);
    // The count and another field: a full apply.
    const edited = structuredClone(asleep);
    edited.spec!.template.spec!.containers[0]!.image = 'example.com/other:1';
    expect(scaleOnly(desiredDeployment(ep, h100, build, 1), edited)).toBe(false);
    // A new spec (another GPU count) with a new count: a full apply.
    const bigger = { ...ep, spec: { ...ep.spec, hardware: { ...ep.spec.hardware, gpuCount: 2 } } };
    expect(scaleOnly(desiredDeployment(bigger, h100, build, 1), asleep)).toBe(false);
  });
});
