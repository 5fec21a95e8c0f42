// The rules of creating and changing a dedicated endpoint, apart from HTTP: the hardware must be a
// catalog instance type open for new endpoints, a new endpoint gets the caller's account (and a fresh
// id unless the caller names one), the model is fixed for an endpoint's life, and the runtime stores
// it (with its hub token, where the runtime can keep one).
import {
  DedicatedEndpointSpecSchema,
  checkHardware,
  isEndpointId,
  newEndpointId,
  ANNOTATION_DISPLAY_NAME,
  ENDPOINT_ID_MAX_LENGTH,
  type Catalog,
  type DedicatedEndpoint,
  type DedicatedEndpointSpecInput,
} from '@berth/crds';
import { ApiError, endpointNotFound } from '../platform/errors.ts';
import {
  endpointGpus,
  endpointUsage,
  processAccountLock,
  quotaExceeded,
  type AccountLock,
  type Quotas,
} from '../accounts/quotas.ts';
import type { EndpointCache, EndpointWrites } from './ports.ts';

export interface NewEndpoint {
  name?: string;
  model: string;
  revision: string;
  maxModelLen?: number;
  hubToken?: string;
  hardware: DedicatedEndpointSpecInput['hardware'];
  authMode: NonNullable<DedicatedEndpointSpecInput['authMode']>;
  scaling: NonNullable<DedicatedEndpointSpecInput['scaling']>;
  /** Omitted: the current one (PUT of an existing endpoint), else the default. */
  routing?: NonNullable<DedicatedEndpointSpecInput['routing']>;
}

/** PATCH: any of the fields that change in place (a missing field keeps its value). */
export interface EndpointChange {
  name?: string;
  model?: string;
  revision?: string;
  maxModelLen?: number | null;
  hardware?: Partial<DedicatedEndpointSpecInput['hardware']>;
  authMode?: NonNullable<DedicatedEndpointSpecInput['authMode']>;
  scaling?: Partial<NonNullable<DedicatedEndpointSpecInput['scaling']>>;
  routing?: NonNullable<DedicatedEndpointSpecInput['routing']>;
}

export interface WriteOptions {
  /** The generation the caller last saw (`If-Match`); a different current one is a 409. */
  generation?: number;
}

export type PutOutcome = 'created' | 'updated' | 'unchanged';

export interface EndpointService {
  /** Creates an endpoint for the account; an ApiError (400) names the field a rule refused. */
  create(accountId: string, input: NewEndpoint): Promise<DedicatedEndpoint>;
  /**
   * Makes endpoint `id` what `input` describes: creates it, changes it in place (a new generation),
   * or leaves it as it is. A different model is a 409: it needs a new endpoint.
   */
  put(
    accountId: string,
    id: string,
    input: NewEndpoint,
    options?: WriteOptions,
  ): Promise<{ endpoint: DedicatedEndpoint; outcome: PutOutcome }>;
  /** Changes the given fields of an existing endpoint (a failed one builds again). */
  patch(
    accountId: string,
    id: string,
    change: EndpointChange,
    options?: WriteOptions,
  ): Promise<{ endpoint: DedicatedEndpoint; outcome: Exclude<PutOutcome, 'created'> }>;
}

/** The endpoint, if the caller's account owns it: 404 unknown, 403 another account's (spec §7). */
export function ownedEndpoint(endpoints: EndpointCache, id: string, accountId: string): DedicatedEndpoint {
  const e = isEndpointId(id) ? endpoints.get(id) : undefined;
  if (!e) throw endpointNotFound(id);
  if (e.spec.account !== accountId) throw new ApiError('endpoint_not_owned');
  return e;
}

export function endpointService(deps: {
  catalog: Catalog;
  endpoints: EndpointCache & Pick<EndpointWrites, 'create' | 'update' | 'listFresh'>;
  /** An account's limits on endpoints and GPUs (none when absent). */
  quotas?: (accountId: string) => Promise<Pick<Quotas, 'endpoints' | 'gpus'>>;
  /**
   * Runs an account's writes one at a time, so a quota check and the write it allows cannot
   * interleave with another's; across API replicas it must be a shared lock. Default: this process's.
   */
  lock?: AccountLock;
}): EndpointService {
  const lock = deps.lock ?? processAccountLock();
  const limitsOf = deps.quotas;

  // The account's usage, read from the source (the cache may not show a write made a moment ago).
  const usage = async (accountId: string, except?: string) =>
    endpointUsage(await deps.endpoints.listFresh(), accountId, except);
  const gpusOf = (spec: DedicatedEndpointSpecInput) => endpointGpus(DedicatedEndpointSpecSchema.parse(spec));

  /** 403 `quota_exceeded` unless one more endpoint with this spec fits the account's quotas. */
  const checkNew = async (accountId: string, spec: DedicatedEndpointSpecInput) => {
    if (!limitsOf) return;
    const quotas = await limitsOf(accountId);
    const u = await usage(accountId);
    if (u.endpoints + 1 > quotas.endpoints)
      throw quotaExceeded('endpoints', u.endpoints, u.endpoints + 1, quotas.endpoints);
    const gpus = u.gpus + gpusOf(spec);
    if (gpus > quotas.gpus) throw quotaExceeded('gpus', u.gpus, gpus, quotas.gpus);
  };

  /** A change that raises the endpoint's GPUs must fit the quota; one that does not always may. */
  const checkChange = async (current: DedicatedEndpoint, spec: DedicatedEndpointSpecInput) => {
    if (!limitsOf) return;
    const after = gpusOf(spec);
    if (after <= endpointGpus(current.spec)) return;
    const quotas = await limitsOf(current.spec.account);
    const others = await usage(current.spec.account, current.metadata.name);
    const before = others.gpus + endpointGpus(current.spec);
    if (others.gpus + after > quotas.gpus)
      throw quotaExceeded('gpus', before, others.gpus + after, quotas.gpus);
  };

  const checkCatalog = (hardware: NewEndpoint['hardware'], current?: DedicatedEndpoint) => {
    const hw = checkHardware(deps.catalog, hardware);
    if (!hw.ok) {
      const field = hw.field.replace(/^spec\./, '');
      throw new ApiError('validation_error', {
        message: `Invalid request body: ${field}: ${hw.message}`,
        param: field,
      });
    }
    // An endpoint already on a type closed for new endpoints may stay there.
    if (!hw.instanceType.available && current?.spec.hardware.gpuType !== hw.instanceType.id) {
      throw new ApiError('validation_error', {
        message: `Invalid request body: hardware.gpuType: ${hw.instanceType.id} is not available for new endpoints`,
        param: 'hardware.gpuType',
      });
    }
  };

  const specOf = (accountId: string, input: NewEndpoint, current?: DedicatedEndpoint) => ({
    account: accountId,
    model: {
      id: input.model,
      revision: input.revision,
      ...(input.maxModelLen ? { maxModelLen: input.maxModelLen } : {}),
      // Set once at creation (a Secret the endpoint owns); PUT and PATCH keep it.
      ...(current?.spec.model.hubTokenSecretRef
        ? { hubTokenSecretRef: current.spec.model.hubTokenSecretRef }
        : {}),
    },
    hardware: { gpuType: input.hardware.gpuType, gpuCount: input.hardware.gpuCount },
    authMode: input.authMode,
    scaling: input.scaling,
    ...((input.routing ?? current?.spec.routing)
      ? { routing: { ...current?.spec.routing, ...input.routing } }
      : {}),
    // Engine overrides come from kubectl manifests only; the API keeps them.
    ...(current?.spec.engine ? { engine: current.spec.engine } : {}),
  });

  const change = async (
    current: DedicatedEndpoint,
    input: NewEndpoint,
    options: WriteOptions,
  ): Promise<{ endpoint: DedicatedEndpoint; outcome: 'updated' | 'unchanged' }> => {
    const id = current.metadata.name;
    if (input.model !== current.spec.model.id) {
      throw new ApiError('endpoint_immutable', {
        message: `model cannot be changed in place: ${id} serves ${current.spec.model.id}. Create a new endpoint for ${input.model} (or delete ${id} and create it again)`,
        param: 'model',
      });
    }
    if (input.hubToken !== undefined) {
      throw new ApiError('endpoint_immutable', {
        message: `hubToken is accepted only when an endpoint is created: ${id} already exists. Leave hubToken out to change its other fields`,
        param: 'hubToken',
      });
    }
    if (current.metadata.deletionTimestamp) {
      throw new ApiError('endpoint_conflict', { message: `Endpoint ${id} is being terminated` });
    }
    checkCatalog(input.hardware, current);
    const spec = specOf(current.spec.account, input, current);
    const displayName = input.name ?? current.metadata.annotations?.[ANNOTATION_DISPLAY_NAME] ?? id;
    const same =
      JSON.stringify(DedicatedEndpointSpecSchema.parse(spec)) ===
        JSON.stringify(DedicatedEndpointSpecSchema.parse(current.spec)) &&
      displayName === (current.metadata.annotations?.[ANNOTATION_DISPLAY_NAME] ?? id);
    if (same && (options.generation === undefined || options.generation === current.metadata.generation))
      return { endpoint: current, outcome: 'unchanged' };
    await checkChange(current, spec);
    const endpoint = await deps.endpoints.update(id, {
      displayName,
      spec,
      ...(options.generation !== undefined ? { generation: options.generation } : {}),
    });
    return { endpoint, outcome: 'updated' };
  };

  return {
    async create(accountId, input) {
      checkCatalog(input.hardware);
      const id = newEndpointId();
      const spec = specOf(accountId, input);
      return lock(accountId, async () => {
        await checkNew(accountId, spec);
        return deps.endpoints.create({
          id,
          displayName: input.name ?? id,
          spec,
          ...(input.hubToken ? { hubToken: input.hubToken } : {}),
        });
      });
    },

    put: (accountId, id, input, options = {}) => lock(accountId, () => put(accountId, id, input, options)),

    patch: (accountId, id, change, options = {}) =>
      lock(accountId, () => patch(accountId, id, change, options)),
  };

  async function put(
    accountId: string,
    id: string,
    input: NewEndpoint,
    options: WriteOptions,
  ): Promise<{ endpoint: DedicatedEndpoint; outcome: PutOutcome }> {
    {
      if (!isEndpointId(id)) {
        throw new ApiError('validation_error', {
          message: `Invalid endpoint id ${JSON.stringify(id)}: an id is "endpt-" followed by lowercase letters, digits and "-" (not at the end), at most ${ENDPOINT_ID_MAX_LENGTH} characters`,
          param: 'id',
        });
      }
      const current = deps.endpoints.get(id);
      if (current) {
        if (current.spec.account !== accountId) throw new ApiError('endpoint_not_owned');
        return change(current, input, options);
      }
      // A generation names a version the caller saw: the endpoint has gone since.
      if (options.generation !== undefined) throw endpointNotFound(id);
      checkCatalog(input.hardware);
      const spec = specOf(accountId, input);
      await checkNew(accountId, spec);
      const endpoint = await deps.endpoints.create({
        id,
        displayName: input.name ?? id,
        spec,
        ...(input.hubToken ? { hubToken: input.hubToken } : {}),
      });
      return { endpoint, outcome: 'created' };
    }
  }

  async function patch(
    accountId: string,
    id: string,
    patch: EndpointChange,
    options: WriteOptions,
  ): Promise<{ endpoint: DedicatedEndpoint; outcome: 'updated' | 'unchanged' }> {
    {
      const current = ownedEndpoint(deps.endpoints, id, accountId);
      const s = current.spec;
      const maxModelLen = patch.maxModelLen === undefined ? s.model.maxModelLen : patch.maxModelLen;
      const scaling = { ...s.scaling, ...patch.scaling };
      if (scaling.minReplicas > scaling.maxReplicas) {
        throw new ApiError('validation_error', {
          message: `Invalid request body: scaling.minReplicas: must be less than or equal to scaling.maxReplicas (${scaling.maxReplicas})`,
          param: 'scaling.minReplicas',
        });
      }
      return change(
        current,
        {
          ...(patch.name !== undefined ? { name: patch.name } : {}),
          model: patch.model ?? s.model.id,
          revision: patch.revision ?? s.model.revision,
          ...(maxModelLen ? { maxModelLen } : {}),
          hardware: { ...s.hardware, ...patch.hardware },
          authMode: patch.authMode ?? s.authMode,
          scaling,
          ...(patch.routing ? { routing: patch.routing } : {}),
        },
        options,
      );
    }
  }
}
