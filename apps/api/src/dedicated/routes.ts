// /api/endpoints: provision, list, inspect, change, wake and terminate dedicated endpoints. The rules
// are the endpoint service's (./service.ts); the bodies and views are ./views.ts.
import { z } from 'zod';
import type { Catalog, DedicatedEndpoint } from '@berth/crds';
import { ApiError, endpointNotFound } from '../platform/errors.ts';
import type { Routes } from '../http/routes.ts';
import { simpleError } from '../http/openapi.ts';
import { parse } from '../http/validate.ts';
import { listPage, listQuery, pageOf } from '../http/lists.ts';
import type { AccountLock, Quotas } from '../accounts/quotas.ts';
import type { EndpointCache, EndpointLogs, EndpointWrites } from './ports.ts';
import { endpointService, ownedEndpoint, type EndpointService } from './service.ts';
import type { PlatformUpstream } from './upstream/endpoint-upstream.ts';
import {
  createEndpointBody,
  endpointView,
  patchEndpointBody,
  publicBase,
  sendEndpoint,
  viewEndpoint,
  writeOptions,
} from './views.ts';

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

/** Provision, list, inspect, change, wake and terminate dedicated endpoints (compute or global keys). */
export function registerEndpointRoutes(routes: Routes, deps: EndpointRouteDeps): void {
  const service = endpointService(deps);
  provisioning(routes, deps, service);
  changes(routes, deps, service);
  operations(routes, deps);
}

/** POST /api/endpoints, the account's list, one endpoint. */
function provisioning(routes: Routes, deps: EndpointRouteDeps, service: EndpointService): void {
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
}

/** PUT (create or update by id), PATCH and DELETE of one endpoint. */
function changes(routes: Routes, deps: EndpointRouteDeps, service: EndpointService): void {
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
}

/** Wake a hibernated endpoint; read (or follow) its logs. */
function operations(routes: Routes, deps: EndpointRouteDeps): void {
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
      if (caller.signal.aborted)
        throw caller.signal.reason instanceof ApiError
          ? caller.signal.reason
          : new ApiError('api_key_revoked');
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
