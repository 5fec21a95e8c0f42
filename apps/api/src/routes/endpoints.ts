import type { Request } from 'express';
import { z } from 'zod';
import {
  ANNOTATION_DISPLAY_NAME,
  DedicatedEndpointSpecSchema,
  HardwareSpecSchema,
  ModelSpecSchema,
  PHASE_LABELS,
  ScalingSpecSchema,
  isEndpointId,
  type Catalog,
  type DedicatedEndpoint,
  type Phase,
} from '@berth/crds';
import { ApiError } from '../errors.ts';
import type { Routes } from '../http/routes.ts';
import { simpleError } from '../openapi.ts';
import type { EndpointCache, EndpointWrites } from '../endpoints/ports.ts';
import { endpointService } from '../endpoints/service.ts';
import type { PlatformUpstream } from '../upstream/platform.ts';
import type { EndpointLogs } from '../endpoints/ports.ts';

/**
 * The body of POST /api/endpoints: the resource's own field schemas (limits, defaults and messages
 * have their one home in @berth/crds), with unknown fields refused, plus the API's `name` and
 * `hubToken`.
 */
export const createEndpointBody = z.strictObject({
  name: z.string().trim().min(1, 'must not be empty').max(100, 'must be at most 100 characters').optional(),
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
});

export const endpointView = z.object({
  id: z.string().describe('`endpt-…`; the path segment of /api/d/{id}/…'),
  object: z.literal('dedicated_endpoint'),
  name: z.string(),
  model: z.string(),
  revision: z.string(),
  hardware: z.object({ gpuType: z.string(), gpuCount: z.number() }),
  authMode: z.enum(['Private', 'Public']),
  scaling: z.object({ minReplicas: z.number(), maxReplicas: z.number(), idleTimeoutSeconds: z.number() }),
  status: z.enum(['building', 'up', 'hibernated', 'waking', 'failed']),
  label: z.enum(['PROVISIONING', 'ONLINE', 'SLEEPING', 'WAKING UP', 'FAILED']).describe('Dashboard label'),
  reason: z.string().nullable(),
  message: z.string().nullable(),
  replicas: z.number(),
  readyReplicas: z.number(),
  baseUrl: z.string().describe('OpenAI base URL: pass it as `baseURL` to the OpenAI SDK'),
  createdAt: z.string().nullable(),
  lastTransitionTime: z.string().nullable(),
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
    hardware: { gpuType: e.spec.hardware.gpuType, gpuCount: e.spec.hardware.gpuCount },
    authMode: e.spec.authMode ?? 'Private',
    scaling: {
      minReplicas: e.spec.scaling?.minReplicas ?? 0,
      maxReplicas: e.spec.scaling?.maxReplicas ?? 1,
      idleTimeoutSeconds: e.spec.scaling?.idleTimeoutSeconds ?? 900,
    },
    status: phase,
    label: PHASE_LABELS[phase],
    reason: e.status?.reason ?? null,
    message: e.status?.message ?? null,
    replicas: e.status?.replicas ?? 0,
    readyReplicas: e.status?.readyReplicas ?? 0,
    baseUrl: `${base}/api/d/${e.metadata.name}`,
    createdAt: created ? new Date(created).toISOString() : null,
    lastTransitionTime: e.status?.lastTransitionTime ?? null,
  };
}

/** The endpoint, if the caller's account owns it: 404 unknown, 403 another account's (spec §7). */
export function ownedEndpoint(endpoints: EndpointCache, id: string, accountId: string): DedicatedEndpoint {
  const e = isEndpointId(id) ? endpoints.get(id) : undefined;
  if (!e) throw new ApiError('not_found', { message: `Dedicated endpoint ${id} not found` });
  if (e.spec.account !== accountId) throw new ApiError('endpoint_not_owned');
  return e;
}

export interface EndpointRouteDeps {
  endpoints: EndpointCache & Pick<EndpointWrites, 'create' | 'delete'>;
  upstream: Pick<PlatformUpstream, 'wake'>;
  logs: EndpointLogs;
  catalog: Catalog;
  publicUrl?: string;
}

const auth = { scopes: ['compute', 'global'], session: 'manage' } as const;
const errors = {
  401: { description: 'Missing, malformed or revoked key', schema: simpleError },
  403: { description: 'Not a compute or global key, or another account’s endpoint', schema: simpleError },
};
const byId = { 404: { description: 'No such endpoint', schema: simpleError } };

/** Provision, list, inspect, wake and terminate dedicated endpoints (compute or global keys). */
export function registerEndpointRoutes(routes: Routes, deps: EndpointRouteDeps): void {
  const service = endpointService(deps);
  routes.add(
    {
      method: 'post',
      path: '/api/endpoints',
      tag: 'endpoints',
      auth,
      summary: 'Provision a dedicated endpoint',
      description:
        'Validated against the hardware catalog. The endpoint starts in `building`; a model that does not fit the hardware, or a gated model without a valid hub token, ends in `failed` with the reason.',
      body: createEndpointBody,
      responses: {
        201: { description: 'The endpoint', schema: endpointView },
        400: { description: 'Invalid body or hardware', schema: simpleError },
        ...errors,
      },
    },
    async ({ req, res, caller, body }) => {
      const created = await service.create(caller.accountId, body());
      res.status(201).json(viewEndpoint(created, publicBase(req, deps.publicUrl)));
    },
  );

  routes.add(
    {
      method: 'get',
      path: '/api/endpoints',
      tag: 'endpoints',
      auth,
      summary: "List the account's endpoints, including those created with kubectl",
      responses: {
        200: { description: 'Endpoints', schema: z.object({ data: z.array(endpointView) }) },
        ...errors,
      },
    },
    ({ req, res, caller }) => {
      const base = publicBase(req, deps.publicUrl);
      const data = deps.endpoints
        .list()
        .filter((e) => e.spec.account === caller.accountId)
        .sort((a, b) =>
          String(a.metadata.creationTimestamp).localeCompare(String(b.metadata.creationTimestamp)),
        )
        .map((e) => viewEndpoint(e, base));
      res.json({ data });
    },
  );

  routes.add(
    {
      method: 'get',
      path: '/api/endpoints/{id}',
      tag: 'endpoints',
      auth,
      summary: 'An endpoint: status, dashboard label, reason, message, replicas',
      responses: { 200: { description: 'The endpoint', schema: endpointView }, ...byId, ...errors },
    },
    ({ req, res, caller, params }) => {
      const e = ownedEndpoint(deps.endpoints, params.id, caller.accountId);
      res.json(viewEndpoint(e, publicBase(req, deps.publicUrl)));
    },
  );

  routes.add(
    {
      method: 'delete',
      path: '/api/endpoints/{id}',
      tag: 'endpoints',
      auth,
      summary: 'Terminate an endpoint (its replicas and cached state are removed)',
      responses: {
        200: {
          description: 'Terminated',
          schema: z.object({
            id: z.string(),
            object: z.literal('dedicated_endpoint'),
            deleted: z.literal(true),
          }),
        },
        ...byId,
        ...errors,
      },
    },
    async ({ res, caller, params }) => {
      const e = ownedEndpoint(deps.endpoints, params.id, caller.accountId);
      if (!(await deps.endpoints.delete(e.metadata.name)))
        throw new ApiError('not_found', { message: `Dedicated endpoint ${e.metadata.name} not found` });
      res.json({ id: e.metadata.name, object: 'dedicated_endpoint', deleted: true });
    },
  );

  routes.add(
    {
      method: 'post',
      path: '/api/endpoints/{id}/wake',
      tag: 'endpoints',
      auth,
      summary: 'Wake a hibernated endpoint (no-op in any other state)',
      responses: {
        202: { description: 'Wake requested; poll GET /api/endpoints/{id}', schema: endpointView },
        ...byId,
        ...errors,
      },
    },
    async ({ req, res, caller, params }) => {
      const e = ownedEndpoint(deps.endpoints, params.id, caller.accountId);
      if (e.status?.phase === 'hibernated') await deps.upstream.wake(e);
      res.status(202).json(viewEndpoint(e, publicBase(req, deps.publicUrl)));
    },
  );

  routes.add(
    {
      method: 'get',
      path: '/api/endpoints/{id}/logs',
      tag: 'endpoints',
      auth,
      summary:
        "The endpoint's logs: its status and events, then its replicas' output (`?follow=true` keeps streaming)",
      responses: {
        200: { description: 'Plain text, streamed', schema: z.string(), contentType: 'text/plain' },
        ...byId,
        ...errors,
      },
    },
    async ({ req, res, caller, params }) => {
      const e = ownedEndpoint(deps.endpoints, params.id, caller.accountId);
      const controller = new AbortController();
      res.on('close', () => controller.abort());
      res.status(200).type('text/plain; charset=utf-8');
      res.setHeader('cache-control', 'no-cache');
      res.flushHeaders();
      await deps.logs.stream(e, res, {
        follow: req.query.follow === 'true' || req.query.follow === '1',
        signal: controller.signal,
      });
      if (!res.writableEnded) res.end();
    },
  );
}
