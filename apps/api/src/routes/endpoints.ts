import type { Request, Response } from 'express';
import { z } from 'zod';
import {
  ANNOTATION_DISPLAY_NAME,
  DedicatedEndpointSpecSchema,
  HardwareSpecSchema,
  ModelSpecSchema,
  PHASE_LABELS,
  ScalingSpecSchema,
  RoutingSpecSchema,
  RoutingStrategySchema,
  DEFAULT_ROUTING_STRATEGY,
  type Catalog,
  type DedicatedEndpoint,
  type Phase,
} from '@berth/crds';
import { ApiError, endpointNotFound } from '../errors.ts';
import type { Routes } from '../http/routes.ts';
import { simpleError } from '../openapi.ts';
import { humanName, parse } from '../http/validate.ts';
import { listPage, listQuery, pageOf } from './views.ts';
import type { EndpointCache, EndpointWrites } from '../endpoints/ports.ts';
import { endpointService, ownedEndpoint, type WriteOptions } from '../endpoints/service.ts';
import type { PlatformUpstream } from '../upstream/platform.ts';
import type { EndpointLogs } from '../endpoints/ports.ts';
import type { AccountLock, Quotas } from '../quotas.ts';

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
  scaling: z.object({ minReplicas: z.number(), maxReplicas: z.number(), idleTimeoutSeconds: z.number() }),
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
  };
}

export interface EndpointRouteDeps {
  endpoints: EndpointCache & Pick<EndpointWrites, 'create' | 'update' | 'delete' | 'listFresh'>;
  /** Per-account limits on endpoints and GPUs (none when absent). */
  quotas?: (accountId: string) => Promise<Pick<Quotas, 'endpoints' | 'gpus'>>;
  /** Serializes an account's writes across API replicas (default: within this process). */
  lock?: AccountLock;
  upstream: Pick<PlatformUpstream, 'wake'>;
  logs: EndpointLogs;
  catalog: Catalog;
  publicUrl?: string;
}

/** `If-Match: "3"` names the generation the caller saw (the ETag of GET); absent, no precondition. */
function writeOptions(req: Request): WriteOptions {
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

/** The endpoint with its generation as the ETag (for a later If-Match). */
/**
 * The ETag is the spec's generation, for `If-Match`: it does not change with the status. So the view is
 * never stored by HTTP caches (`no-store`) and never answered 304 on `If-None-Match` (written with
 * `end()`, not `json()`, which would compare the two): a browser polling an endpoint got its first
 * body (PROVISIONING) back from its cache for as long as the generation stayed the same.
 */
function sendEndpoint(res: Response, e: DedicatedEndpoint, base: string, status = 200): void {
  res
    .status(status)
    .setHeader('etag', `"${e.metadata.generation ?? 1}"`)
    .setHeader('cache-control', 'no-store')
    .type('json')
    .end(JSON.stringify(viewEndpoint(e, base)));
}

const auth = { scopes: ['compute', 'global'], session: 'manage' } as const;
const errors = {
  401: { description: 'Missing, malformed or revoked key', schema: simpleError },
  403: { description: 'Not a compute or global key, or another account’s endpoint', schema: simpleError },
};
const byId = { 404: { description: 'No such endpoint', schema: simpleError } };
const writeErrors = {
  400: { description: 'Invalid body, hardware, id or If-Match', schema: simpleError },
  409: {
    description:
      'A change of `model` (or `hubToken`) on an existing endpoint, an endpoint being terminated, or a generation (If-Match) that is not current: another write came first',
    schema: simpleError,
  },
};
const ifMatchNote =
  'With `If-Match: "<generation>"` (the ETag of GET), the write happens only if nobody changed the endpoint since (409 otherwise).';

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
      summary:
        "List the account's endpoints, including those created with kubectl, oldest first, a page at a time",
      description:
        'Query: `limit` (1–100, default 100) and `after` (the `last_id` of the previous page). An `after` endpoint deleted since is a 400: start again without it.',
      query: listQuery,
      responses: {
        200: { description: 'One page of endpoints, oldest first', schema: listPage(endpointView) },
        400: { description: '`limit` or `after` is invalid (named in the message)', schema: simpleError },
        ...errors,
      },
    },
    ({ req, res, caller }) => {
      const q = parse(listQuery, req.query, 'query');
      const base = publicBase(req, deps.publicUrl);
      const created = (e: DedicatedEndpoint) => String(e.metadata.creationTimestamp ?? '');
      // Creation time, then id: a total order, so pages neither overlap nor skip.
      const mine = deps.endpoints
        .list()
        .filter((e) => e.spec.account === caller.accountId)
        .sort(
          (a, b) => created(a).localeCompare(created(b)) || a.metadata.name.localeCompare(b.metadata.name),
        );
      let from = 0;
      if (q.after !== undefined) {
        const at = mine.findIndex((e) => e.metadata.name === q.after);
        if (at < 0)
          throw new ApiError('validation_error', {
            message: `Invalid query: after: no endpoint ${q.after} in this account (deleted since? list again without after)`,
            param: 'after',
          });
        from = at + 1;
      }
      const page = mine.slice(from, from + q.limit);
      res.json(
        pageOf(
          page.map((e) => viewEndpoint(e, base)),
          from + q.limit < mine.length,
        ),
      );
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
      sendEndpoint(res, e, publicBase(req, deps.publicUrl));
    },
  );

  routes.add(
    {
      method: 'put',
      path: '/api/endpoints/{id}',
      tag: 'endpoints',
      auth,
      summary: 'Create or update the endpoint with this id (idempotent)',
      description:
        'The id is yours to choose (`endpt-` + lowercase letters, digits and `-`, at most 63 characters), as `metadata.name` is with kubectl. ' +
        'A missing endpoint is created (201); an existing one of your account is changed in place when the body differs (200, a new generation: a failed endpoint builds again) and left alone when it does not (200, same generation). ' +
        'Fields left out take their defaults, as on creation. `model` cannot change (409: create a new endpoint), and `hubToken` is accepted only on creation. ' +
        ifMatchNote,
      body: createEndpointBody,
      responses: {
        200: { description: 'The endpoint, changed or as it was', schema: endpointView },
        201: { description: 'The endpoint, created', schema: endpointView },
        ...writeErrors,
        ...errors,
      },
    },
    async ({ req, res, caller, params, body }) => {
      // Another account's endpoint is refused before the body is looked at.
      const existing = deps.endpoints.get(params.id);
      if (existing && existing.spec.account !== caller.accountId) throw new ApiError('endpoint_not_owned');
      const options = writeOptions(req);
      const { endpoint, outcome } = await service.put(caller.accountId, params.id, body(), options);
      sendEndpoint(res, endpoint, publicBase(req, deps.publicUrl), outcome === 'created' ? 201 : 200);
    },
  );

  routes.add(
    {
      method: 'patch',
      path: '/api/endpoints/{id}',
      tag: 'endpoints',
      auth,
      summary: 'Change an endpoint in place: hardware, maxModelLen, revision, scaling, auth mode, name',
      description:
        'Fields left out keep their value. A change is a new generation, which the operator rolls out; a `failed` endpoint builds again. ' +
        '`model` may be sent only unchanged (409 otherwise). ' +
        ifMatchNote,
      body: patchEndpointBody,
      responses: {
        200: { description: 'The endpoint', schema: endpointView },
        ...byId,
        ...writeErrors,
        ...errors,
      },
    },
    async ({ req, res, caller, params, body }) => {
      ownedEndpoint(deps.endpoints, params.id, caller.accountId);
      const options = writeOptions(req);
      const { endpoint } = await service.patch(caller.accountId, params.id, body(), options);
      sendEndpoint(res, endpoint, publicBase(req, deps.publicUrl));
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
      if (!(await deps.endpoints.delete(e.metadata.name))) throw endpointNotFound(e.metadata.name);
      res.json({ id: e.metadata.name, object: 'dedicated_endpoint', deleted: true });
    },
  );

  routes.add(
    {
      method: 'post',
      path: '/api/endpoints/{id}/wake',
      tag: 'endpoints',
      auth,
      summary: 'Wake a hibernated endpoint (no-op while building, waking or up)',
      description:
        'A `failed` endpoint does not wake: the answer is 409, and a PATCH that changes it builds it again.',
      responses: {
        202: { description: 'Wake requested; poll GET /api/endpoints/{id}', schema: endpointView },
        ...byId,
        409: { description: 'The endpoint has failed', schema: simpleError },
        ...errors,
      },
    },
    async ({ req, res, caller, params }) => {
      const e = ownedEndpoint(deps.endpoints, params.id, caller.accountId);
      if (e.status?.phase === 'failed') {
        const id = e.metadata.name;
        throw new ApiError('endpoint_not_wakeable', {
          message: `Endpoint ${id} has failed (${e.status.reason ?? 'unknown reason'}), and waking does not rebuild it: change it with PATCH /api/endpoints/${id} (hardware, maxModelLen, revision, scaling or authMode) to build it again, or delete it. GET /api/endpoints/${id}/logs shows the cause.`,
        });
      }
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
      // A follower ends when the client leaves, when its key is revoked (spec §3: requests in flight
      // fail at once) and when the endpoint is deleted; the last two say why in a last line.
      const controller = new AbortController();
      let why: string | undefined;
      const end = (reason?: string) => {
        why ??= reason;
        controller.abort();
      };
      res.on('close', () => end());
      const revoked = () =>
        end(`# ${(caller.signal.reason as Error | undefined)?.message ?? 'Invalid API key'}`);
      if (caller.signal.aborted) throw new ApiError('invalid_api_key');
      caller.signal.addEventListener('abort', revoked, { once: true });
      const follow = req.query.follow === 'true' || req.query.follow === '1';
      // A follower sees each change of phase or reason as a status line, as it happens.
      const phaseLine = (x: typeof e) =>
        `# phase: ${x.status?.phase ?? 'building'}${x.status?.reason ? ` (${x.status.reason})` : ''}`;
      let shown = phaseLine(e);
      const stopWatching = deps.endpoints.watch(e.metadata.name, (now) => {
        if (!now || now.metadata.deletionTimestamp) return end(`# endpoint ${e.metadata.name} was deleted`);
        const next = phaseLine(now);
        if (follow && next !== shown && !res.writableEnded && !controller.signal.aborted) {
          shown = next;
          res.write(`${next}\n`);
        }
      });
      try {
        res.status(200).type('text/plain; charset=utf-8');
        res.setHeader('cache-control', 'no-cache');
        res.flushHeaders();
        await deps.logs.stream(e, res, { follow, signal: controller.signal });
        if (!res.writableEnded) res.end(why ? `${why}\n` : undefined);
      } finally {
        stopWatching();
        caller.signal.removeEventListener('abort', revoked);
      }
    },
  );
}
