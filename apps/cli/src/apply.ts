// berth apply -f: the DedicatedEndpoint manifests a cluster admin gives kubectl, made so through the
// API (PUT /api/endpoints/{id} is idempotent). metadata.name is the endpoint id; spec.account comes
// from the key. The plan compares each manifest with the endpoint as the API shows it.
import { readFileSync } from 'node:fs';
import { parseAllDocuments } from 'yaml';
import type { Client, Endpoint, EndpointBody } from './client.ts';

const API_VERSION = 'berth.dev/v1alpha1';
const KIND = 'DedicatedEndpoint';
const DISPLAY_NAME = 'berth.dev/display-name';

export interface Manifest {
  id: string;
  body: EndpointBody;
}

export class ManifestError extends Error {}

export function readManifests(file: string): Manifest[] {
  const text = file === '-' ? readFileSync(0, 'utf8') : readFileSync(file, 'utf8');
  const out: Manifest[] = [];
  parseAllDocuments(text).forEach((doc, i) => {
    if (doc.errors.length) throw new ManifestError(`${file}: document ${i + 1}: ${doc.errors[0]!.message}`);
    const m = doc.toJS() as Record<string, any> | null; // eslint-disable-line @typescript-eslint/no-explicit-any
    if (m === null) return;
    const where = `${file}: document ${i + 1}`;
    if (m.apiVersion !== API_VERSION || m.kind !== KIND)
      throw new ManifestError(`${where}: expected apiVersion ${API_VERSION}, kind ${KIND}`);
    const id = m.metadata?.name;
    if (typeof id !== 'string')
      throw new ManifestError(`${where}: metadata.name (the endpoint id) is required`);
    const spec = m.spec ?? {};
    if (spec.engine)
      throw new ManifestError(`${where} (${id}): spec.engine is for kubectl only; the API does not set it`);
    if (spec.model?.hubTokenSecretRef)
      throw new ManifestError(
        `${where} (${id}): spec.model.hubTokenSecretRef names a Secret in a cluster; with the API, create the endpoint with \`berth endpoints create --hub-token\``,
      );
    const body: Record<string, unknown> = {
      model: spec.model?.id,
      hardware: spec.hardware,
      ...(spec.model?.revision !== undefined ? { revision: spec.model.revision } : {}),
      ...(spec.model?.maxModelLen !== undefined ? { maxModelLen: spec.model.maxModelLen } : {}),
      ...(spec.authMode !== undefined ? { authMode: spec.authMode } : {}),
      ...(spec.scaling !== undefined ? { scaling: spec.scaling } : {}),
      ...(m.metadata?.annotations?.[DISPLAY_NAME] ? { name: m.metadata.annotations[DISPLAY_NAME] } : {}),
    };
    out.push({ id, body: body as EndpointBody });
  });
  const ids = out.map((m) => m.id);
  const dup = ids.find((id, i) => ids.indexOf(id) !== i);
  if (dup) throw new ManifestError(`${file}: ${dup} is listed twice`);
  return out;
}

/** The fields of `current` that `body` would change (defaults as the API applies them). */
export function changes(current: Endpoint, body: EndpointBody): string[] {
  const want = {
    model: body.model,
    revision: body.revision ?? 'main',
    maxModelLen: body.maxModelLen ?? null,
    'hardware.gpuType': body.hardware.gpuType,
    'hardware.gpuCount': body.hardware.gpuCount,
    authMode: body.authMode ?? 'Private',
    'scaling.minReplicas': body.scaling?.minReplicas ?? 0,
    'scaling.maxReplicas': body.scaling?.maxReplicas ?? 1,
    'scaling.idleTimeoutSeconds': body.scaling?.idleTimeoutSeconds ?? 900,
    // Compared only when the manifest sets it (left out, the endpoint keeps its value).
    ...(body.scaling?.maxHeldRequests !== undefined
      ? { 'scaling.maxHeldRequests': body.scaling.maxHeldRequests }
      : {}),
    ...(body.name !== undefined ? { name: body.name } : {}),
  };
  const have: Record<string, unknown> = {
    model: current.model,
    revision: current.revision,
    maxModelLen: current.maxModelLen,
    'hardware.gpuType': current.hardware.gpuType,
    'hardware.gpuCount': current.hardware.gpuCount,
    authMode: current.authMode,
    'scaling.minReplicas': current.scaling.minReplicas,
    'scaling.maxReplicas': current.scaling.maxReplicas,
    'scaling.idleTimeoutSeconds': current.scaling.idleTimeoutSeconds,
    'scaling.maxHeldRequests': current.scaling.maxHeldRequests,
    name: current.name,
  };
  return Object.entries(want)
    .filter(([k, v]) => have[k] !== v)
    .map(([k, v]) => `${k}: ${JSON.stringify(have[k])} → ${JSON.stringify(v)}`);
}

export type Action =
  | { id: string; action: 'create'; changes: string[] }
  | { id: string; action: 'update'; changes: string[] }
  | { id: string; action: 'unchanged'; changes: string[] }
  | { id: string; action: 'delete' | 'not-listed'; changes: string[] };

export function plan(manifests: Manifest[], existing: Endpoint[], prune: boolean): Action[] {
  const byId = new Map(existing.map((e) => [e.id, e]));
  const actions: Action[] = manifests.map((m) => {
    const current = byId.get(m.id);
    if (!current) return { id: m.id, action: 'create', changes: [] };
    const c = changes(current, m.body);
    return { id: m.id, action: c.length ? 'update' : 'unchanged', changes: c };
  });
  const listed = new Set(manifests.map((m) => m.id));
  for (const e of existing)
    if (!listed.has(e.id)) actions.push({ id: e.id, action: prune ? 'delete' : 'not-listed', changes: [] });
  return actions;
}

const PAST = {
  create: 'created',
  update: 'configured',
  unchanged: 'unchanged',
  delete: 'deleted (pruned)',
} as const;

export async function apply(
  client: Client,
  file: string,
  opts: { dryRun: boolean; prune: boolean },
): Promise<Action[]> {
  const manifests = readManifests(file);
  const existing = await client.listAll('/api/endpoints');
  const actions = plan(manifests, existing, opts.prune);
  const suffix = opts.dryRun ? ' (dry run)' : '';
  for (const a of actions) {
    if (a.action === 'not-listed') {
      process.stdout.write(`${a.id} not in ${file}: kept (--prune deletes it)\n`);
      continue;
    }
    if (!opts.dryRun && a.action !== 'unchanged') {
      if (a.action === 'delete') await client.call('delete', '/api/endpoints/{id}', { params: { id: a.id } });
      else {
        const m = manifests.find((x) => x.id === a.id)!;
        await client.call('put', '/api/endpoints/{id}', { params: { id: a.id }, body: m.body });
      }
    }
    const verb = opts.dryRun && a.action !== 'unchanged' ? `would be ${PAST[a.action]}` : PAST[a.action];
    process.stdout.write(`dedicatedendpoint/${a.id} ${verb}${suffix}\n`);
    for (const c of a.changes) process.stdout.write(`  ${c}\n`);
  }
  return actions;
}
