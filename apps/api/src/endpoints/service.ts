// The rules of creating a dedicated endpoint, apart from HTTP: the hardware must be a catalog
// instance type open for new endpoints, the endpoint gets a fresh id and the caller's account, and
// the runtime stores it (with its hub token, where the runtime can keep one).
import {
  checkHardware,
  newEndpointId,
  type Catalog,
  type DedicatedEndpoint,
  type DedicatedEndpointSpecInput,
} from '@berth/crds';
import { ApiError } from '../errors.ts';
import type { EndpointWrites } from './ports.ts';

export interface NewEndpoint {
  name?: string;
  model: string;
  revision: string;
  maxModelLen?: number;
  hubToken?: string;
  hardware: DedicatedEndpointSpecInput['hardware'];
  authMode: NonNullable<DedicatedEndpointSpecInput['authMode']>;
  scaling: NonNullable<DedicatedEndpointSpecInput['scaling']>;
}

export interface EndpointService {
  /** Creates an endpoint for the account; an ApiError (400) names the field a rule refused. */
  create(accountId: string, input: NewEndpoint): Promise<DedicatedEndpoint>;
}

export function endpointService(deps: {
  catalog: Catalog;
  endpoints: Pick<EndpointWrites, 'create'>;
}): EndpointService {
  return {
    async create(accountId, input) {
      const hw = checkHardware(deps.catalog, input.hardware);
      if (!hw.ok) {
        const field = hw.field.replace(/^spec\./, '');
        throw new ApiError('validation_error', {
          message: `Invalid request body: ${field}: ${hw.message}`,
          param: field,
        });
      }
      if (!hw.instanceType.available) {
        throw new ApiError('validation_error', {
          message: `Invalid request body: hardware.gpuType: ${hw.instanceType.id} is not available for new endpoints`,
          param: 'hardware.gpuType',
        });
      }
      const id = newEndpointId();
      return deps.endpoints.create({
        id,
        displayName: input.name ?? id,
        spec: {
          account: accountId,
          model: {
            id: input.model,
            revision: input.revision,
            ...(input.maxModelLen ? { maxModelLen: input.maxModelLen } : {}),
          },
          hardware: input.hardware,
          authMode: input.authMode,
          scaling: input.scaling,
        },
        ...(input.hubToken ? { hubToken: input.hubToken } : {}),
      });
    },
  };
}
