import { kubectlOk } from '../cluster/env.ts';

/** `kubectl patch` (merge) of an endpoint's spec: the fields only manifests set (engine, routing). */
export async function patchEndpointSpec(namespace: string, id: string, spec: Record<string, unknown>) {
  await kubectlOk([
    'patch',
    'dedicatedendpoint',
    id,
    '-n',
    namespace,
    '--type=merge',
    '-p',
    JSON.stringify({ spec }),
  ]);
}
