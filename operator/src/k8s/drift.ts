import type { KubernetesObject } from '@kubernetes/client-node';

// Drift: does the live object still hold every field the operator applies, with the value it
// applies? Server-side apply with our field manager owns exactly the fields of the desired object,
// so "differs in the fields we own" is: some field of the desired object is missing or different
// in the live one. Fields the API server defaults (imagePullPolicy, clusterIP, probe timeouts, ...)
// and fields other managers added are not ours and never count. This is Knative's
// `equality.Semantic.DeepDerivative` rule, applied to metadata labels/annotations/owners and spec.

/** The parts of an object we compare: what the builders set, nothing the server fills in. */
function ownedParts(o: KubernetesObject & { spec?: unknown }): unknown {
  return {
    labels: o.metadata?.labels,
    annotations: o.metadata?.annotations,
    ownerReferences: o.metadata?.ownerReferences,
    spec: o.spec,
  };
}

/** Where the live object (undefined = absent) departs from the desired one, or undefined when it does not. */
export function driftOf(
  desired: KubernetesObject & { spec?: unknown },
  live: (KubernetesObject & { spec?: unknown }) | undefined,
): string | undefined {
  if (!live) return 'missing';
  return firstDifference(ownedParts(desired), ownedParts(live), '');
}

function firstDifference(want: unknown, have: unknown, path: string): string | undefined {
  if (want === undefined) return undefined;
  if (have === undefined) return path || '.';
  if (Array.isArray(want)) {
    if (!Array.isArray(have)) return path || '.';
    // Lists of named items (containers, env, ports, volumes) are matched by name: an item someone
    // else added is their field, not drift. Other lists are atomic: same length, same order.
    if (want.every(isNamed)) {
      for (const item of want) {
        const live = have.find((h) => isNamed(h) && h.name === item.name);
        const d = firstDifference(item, live, `${path}[${item.name}]`);
        if (d) return d;
      }
      return undefined;
    }
    if (have.length !== want.length) return path || '.';
    for (let i = 0; i < want.length; i++) {
      const d = firstDifference(want[i], have[i], `${path}[${i}]`);
      if (d) return d;
    }
    return undefined;
  }
  if (want !== null && typeof want === 'object') {
    if (have === null || typeof have !== 'object' || Array.isArray(have)) return path || '.';
    for (const [k, v] of Object.entries(want)) {
      const d = firstDifference(v, (have as Record<string, unknown>)[k], `${path}.${k}`);
      if (d) return d;
    }
    return undefined;
  }
  // Scalars: the API server echoes what we send (quantities as we wrote them, ports as numbers).
  return want === have ? undefined : path;
}

function isNamed(v: unknown): v is { name: string } {
  return v !== null && typeof v === 'object' && typeof (v as { name?: unknown }).name === 'string';
}

/**
 * The live Deployment departs from the desired one only in its replica count: everything else the
 * operator applies is there, as applied.
 */
export function scaleOnly(
  desired: KubernetesObject & { spec?: { replicas?: number } },
  live: KubernetesObject & { spec?: { replicas?: number } },
): boolean {
  const want = desired.spec?.replicas;
  if (want === undefined || live.spec?.replicas === want) return false;
  return (
    driftOf({ ...desired, spec: { ...desired.spec, replicas: live.spec?.replicas } }, live) === undefined
  );
}
