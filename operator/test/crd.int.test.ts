import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { kubectl, kubectlOk, testNamespace } from '@berth/test/cluster/env';
import { installCrd } from '@berth/test/support/operator';

// The CRD refuses bad input at the door, naming the field, and creates nothing.

let ns: Awaited<ReturnType<typeof testNamespace>>;
beforeAll(async () => {
  await installCrd();
  ns = await testNamespace('crd');
});
afterAll(async () => {
  // No operator runs here, but the endpoints carry no finalizer either: deleting the namespace suffices.
  await ns?.remove();
});

const manifest = (name: string, spec: string) => `apiVersion: berth.dev/v1alpha1
kind: DedicatedEndpoint
metadata:
  name: ${name}
spec:
${spec}`;

const good = `  account: acct_1
  model:
    id: org/small
  hardware:
    gpuType: nvidia-h100-80gb
    gpuCount: 2
`;

async function rejected(name: string, spec: string): Promise<string> {
  const r = await kubectl(['apply', '-f', '-'], { input: manifest(name, spec), namespace: ns.name });
  expect(r.code).not.toBe(0);
  const get = await kubectl(['get', 'dedicatedendpoint', name, '--ignore-not-found', '-o', 'name'], {
    namespace: ns.name,
  });
  expect(get.stdout.trim()).toBe(''); // nothing created
  return r.stderr;
}

describe('DedicatedEndpoint CRD validation', () => {
  it('accepts a valid endpoint, applies defaults, and prints the columns', async () => {
    await kubectlOk(['apply', '-f', '-'], { input: manifest('endpt-valid', good), namespace: ns.name });
    const ep = JSON.parse(
      await kubectlOk(['get', 'endpt', 'endpt-valid', '-o', 'json'], { namespace: ns.name }),
    );
    expect(ep.spec).toMatchObject({
      authMode: 'Private',
      scaling: { minReplicas: 0, maxReplicas: 1, idleTimeoutSeconds: 900 },
      model: { id: 'org/small', revision: 'main' },
    });
    const table = await kubectlOk(['get', 'dedicatedendpoints', '-o', 'wide'], { namespace: ns.name });
    expect(table.split('\n')[0]).toMatch(/NAME\s+PHASE\s+MODEL\s+GPU\s+GPUS\s+READY\s+REASON\s+AGE/);
    expect(table).toMatch(/endpt-valid\s+org\/small\s+nvidia-h100-80gb\s+2/);
  });

  it('refuses a name without the endpt- prefix', async () => {
    expect(await rejected('my-endpoint', good)).toMatch(/metadata.name must start with "endpt-"/);
  });

  it('refuses a missing model', async () => {
    expect(
      await rejected(
        'endpt-nomodel',
        `  account: a\n  hardware:\n    gpuType: nvidia-h100-80gb\n    gpuCount: 1\n`,
      ),
    ).toMatch(/spec.model: Required value/);
  });

  it('refuses an invalid model id', async () => {
    expect(await rejected('endpt-badmodel', good.replace('org/small', '"not a model"'))).toMatch(
      /spec.model.id: Invalid value/,
    );
  });

  it('refuses an unknown GPU type', async () => {
    expect(await rejected('endpt-tpu', good.replace('nvidia-h100-80gb', 'google-tpu-v5'))).toMatch(
      /spec.hardware.gpuType: Unsupported value: "google-tpu-v5"/,
    );
  });

  it('refuses a GPU count the instance type does not offer', async () => {
    const err = await rejected('endpt-three', good.replace('gpuCount: 2', 'gpuCount: 3'));
    expect(err).toMatch(/spec.hardware.gpuCount.*must be one of 1, 2, 4, 8 for gpuType nvidia-h100-80gb/);
    const l4 = await rejected(
      'endpt-l4x8',
      good.replace('nvidia-h100-80gb', 'nvidia-l4-24gb').replace('gpuCount: 2', 'gpuCount: 8'),
    );
    expect(l4).toMatch(/must be one of 1, 2, 4 for gpuType nvidia-l4-24gb/);
  });

  it('refuses minReplicas > maxReplicas', async () => {
    expect(
      await rejected('endpt-minmax', `${good}  scaling:\n    minReplicas: 3\n    maxReplicas: 2\n`),
    ).toMatch(/spec.scaling.minReplicas.*must be less than or equal to spec.scaling.maxReplicas/);
  });

  it('refuses an unknown auth mode and a too-short idle timeout', async () => {
    expect(await rejected('endpt-auth', `${good}  authMode: Open\n`)).toMatch(
      /spec.authMode: Unsupported value: "Open"/,
    );
    expect(await rejected('endpt-idle', `${good}  scaling:\n    idleTimeoutSeconds: 1\n`)).toMatch(
      /spec.scaling.idleTimeoutSeconds: Invalid value: 1/,
    );
  });

  it('keeps the owning account immutable', async () => {
    await kubectlOk(['apply', '-f', '-'], { input: manifest('endpt-acct', good), namespace: ns.name });
    const r = await kubectl(['apply', '-f', '-'], {
      input: manifest('endpt-acct', good.replace('acct_1', 'acct_2')),
      namespace: ns.name,
    });
    expect(r.code).not.toBe(0);
    expect(r.stderr).toMatch(/spec.account is immutable/);
  });
});
