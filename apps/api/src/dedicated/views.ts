// What the endpoints routes take and show: the bodies of POST, PUT and PATCH (built from the
// resource's own field schemas in @berth/crds), the endpoint as the API shows it, and its ETag.
import type { Request, Response } from 'express';
import { z } from 'zod';
import {
  ANNOTATION_DISPLAY_NAME,
  DEFAULT_MAX_HELD_REQUESTS,
  DedicatedEndpointSpecSchema,
  HardwareSpecSchema,
  ModelSpecSchema,
  PHASE_LABELS,
  ScalingSpecSchema,
  RoutingSpecSchema,
  RoutingStrategySchema,
  DEFAULT_ROUTING_STRATEGY,
  type DedicatedEndpoint,
  type Phase,
} from '@berth/crds';
import { ApiError } from '../platform/errors.ts';
import { humanName } from '../http/validate.ts';
import type { WriteOptions } from './service.ts';
import { viewWake, wakeView } from './wake-receipt.ts';

/**
 * The body of POST /api/endpoints: the resource's own field schemas (limits, defaults and messages
 * have their one home in @berth/crds), with unknown fields refused, plus the API's `name` and
 * `hubToken`.
 */
export const createEndpointBody = z.strictObject({
  name: humanName(100).optional(),
  model: ModelSpecSchema.shape.id,
  revision: ModelSpecSchema.shape.revision,
  maxModelLen: ModelSpecSchema.shape.maxModelLen,
  hubToken: z
    .string()
    .min(1, 'must not be empty')
    .max(1024)
    .optional()
    .describe(
      'Model hub token for a gated or private model; checked at provisioning time and never shown again',
    ),
  hardware: HardwareSpecSchema.strict(),
  authMode: DedicatedEndpointSpecSchema.shape.authMode,
  scaling: ScalingSpecSchema.strict().prefault({}),
  routing: RoutingSpecSchema.strict()
    .optional()
    .describe('How calls spread over the replicas; omitted: `prefixAffinity` (PUT: keeps the current one)'),
});

const scalingShape = ScalingSpecSchema.shape;

/**
 * The body of PATCH /api/endpoints/{id}: any of the fields that change in place; a field left out
 * keeps its value. `model` is accepted only unchanged (a different model is a new endpoint: 409).
 */
export const patchEndpointBody = z.strictObject({
  name: createEndpointBody.shape.name,
  model: ModelSpecSchema.shape.id.optional(),
  revision: ModelSpecSchema.shape.revision.unwrap().optional(),
  maxModelLen: ModelSpecSchema.shape.maxModelLen
    .unwrap()
    .nullable()
    .optional()
    .describe('null removes the limit (the model’s own context length)'),
  hardware: HardwareSpecSchema.partial().strict().optional(),
  authMode: DedicatedEndpointSpecSchema.shape.authMode.unwrap().optional(),
  scaling: z
    .strictObject({
      minReplicas: scalingShape.minReplicas.unwrap().optional(),
      maxReplicas: scalingShape.maxReplicas.unwrap().optional(),
      idleTimeoutSeconds: scalingShape.idleTimeoutSeconds.unwrap().optional(),
      maxHeldRequests: scalingShape.maxHeldRequests,
    })
    .optional(),
  routing: RoutingSpecSchema.strict().optional(),
});

export const endpointView = z.object({
  id: z.string().describe('`endpt-…`; the path segment of /api/d/{id}/…'),
  object: z.literal('dedicated_endpoint'),
  name: z.string(),
  model: z.string(),
  revision: z.string(),
  maxModelLen: z.number().nullable().describe('Context length limit; null: the model’s own'),
  hardware: z.object({ gpuType: z.string(), gpuCount: z.number() }),
  authMode: z.enum(['Private', 'Public']),
  scaling: z.object({
    minReplicas: z.number(),
    maxReplicas: z.number(),
    idleTimeoutSeconds: z.number(),
    maxHeldRequests: z
      .number()
      .describe('Calls each API replica holds while the endpoint wakes; beyond it 503 with Retry-After'),
  }),
  routing: z.object({ strategy: RoutingStrategySchema }),
  status: z.enum(['building', 'up', 'hibernated', 'waking', 'failed']),
  label: z.enum(['PROVISIONING', 'ONLINE', 'SLEEPING', 'WAKING UP', 'FAILED']).describe('Dashboard label'),
  terminating: z
    .boolean()
    .describe(
      'DELETE was accepted: it takes no calls (404) while its replicas drain, then it is gone. Terminate is not a status (spec §3), so `status` keeps its last value',
    ),
  reason: z.string().nullable(),
  message: z.string().nullable(),
  replicas: z.number(),
  readyReplicas: z.number(),
  baseUrl: z.string().describe('OpenAI base URL: pass it as `baseURL` to the OpenAI SDK'),
  generation: z.number().describe('Bumped by every change of the spec; also the ETag'),
  observedGeneration: z
    .number()
    .nullable()
    .describe(
      'The generation `status` describes: until it equals `generation`, a change is not yet acted on',
    ),
  createdAt: z.string().nullable(),
  lastTransitionTime: z.string().nullable(),
  wake: wakeView,
});
export type EndpointView = z.infer<typeof endpointView>;

export function publicBase(req: Request, configured?: string): string {
  if (configured) return configured.replace(/\/$/, '');
  return `${req.protocol}://${req.get('host') ?? 'localhost'}`;
}

export function viewEndpoint(e: DedicatedEndpoint, base: string): EndpointView {
  const phase: Phase = e.status?.phase ?? 'building';
  const created = e.metadata.creationTimestamp;
  return {
    id: e.metadata.name,
    object: 'dedicated_endpoint',
    name: e.metadata.annotations?.[ANNOTATION_DISPLAY_NAME] ?? e.metadata.name,
    model: e.spec.model.id,
    revision: e.spec.model.revision ?? 'main',
    maxModelLen: e.spec.model.maxModelLen ?? null,
    hardware: { gpuType: e.spec.hardware.gpuType, gpuCount: e.spec.hardware.gpuCount },
    authMode: e.spec.authMode ?? 'Private',
    scaling: {
      minReplicas: e.spec.scaling?.minReplicas ?? 0,
      maxReplicas: e.spec.scaling?.maxReplicas ?? 1,
      idleTimeoutSeconds: e.spec.scaling?.idleTimeoutSeconds ?? 900,
      maxHeldRequests: e.spec.scaling?.maxHeldRequests ?? DEFAULT_MAX_HELD_REQUESTS,
    },
    routing: { strategy: e.spec.routing?.strategy ?? DEFAULT_ROUTING_STRATEGY },
    status: phase,
    label: PHASE_LABELS[phase],
    terminating: !!e.metadata.deletionTimestamp,
    reason: e.status?.reason ?? null,
    message: e.status?.message ?? null,
    replicas: e.status?.replicas ?? 0,
    readyReplicas: e.status?.readyReplicas ?? 0,
    baseUrl: `${base}/api/d/${e.metadata.name}`,
    generation: e.metadata.generation ?? 1,
    observedGeneration: e.status?.observedGeneration ?? null,
    createdAt: created ? new Date(created).toISOString() : null,
    lastTransitionTime: e.status?.lastTransitionTime ?? null,
    wake: viewWake(e, Date.now()),
  };
}

/** `If-Match: "3"` names the generation the caller saw (the ETag of GET); absent, no precondition. */
export function writeOptions(req: Request): WriteOptions {
  const header = req.get('if-match');
  if (header === undefined) return {};
  const m = /^\s*(?:W\/)?"(\d+)"\s*$/.exec(header);
  if (!m) {
    throw new ApiError('validation_error', {
      message: 'If-Match must be an ETag returned by GET /api/endpoints/{id}, e.g. "3"',
      param: 'If-Match',
    });
  }
  return { generation: Number(m[1]) };
}

/**
 * The ETag is the spec's generation, for `If-Match`: it does not change with the status. So the view is
 * never stored by HTTP caches (`no-store`) and never answered 304 on `If-None-Match` (written with
 * `end()`, not `json()`, which would compare the two): a browser polling an endpoint got its first
 * body (PROVISIONING) back from its cache for as long as the generation stayed the same.
 */
export function sendEndpoint(res: Response, e: DedicatedEndpoint, base: string, status = 200): void {
  res
    .status(status)
    .setHeader('etag', `"${e.metadata.generation ?? 1}"`)
    .setHeader('cache-control', 'no-store')
    .type('json')
    .end(JSON.stringify(viewEndpoint(e, base)));
}
