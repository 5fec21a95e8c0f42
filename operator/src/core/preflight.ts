import type { DedicatedEndpoint, InstanceType } from '@berth/crds';
import type { PreflightResult } from './types.ts';

// Checks made before any GPU is provisioned, against the model hub's API (Hugging Face or a
// compatible mirror named by HF_ENDPOINT):
//   GET  {hub}/api/models/{id}                      -> gated, safetensors.parameters / .total
//   HEAD {hub}/{id}/resolve/{revision}/config.json  -> does the token grant access to the files?

export type HubToken =
  { kind: 'none' } | { kind: 'found'; token: string } | { kind: 'missing'; message: string };

export interface PreflightOptions {
  hfEndpoint: string;
  /** Fraction of GPU memory vLLM may use (its --gpu-memory-utilization default). */
  gpuMemoryUtilization: number;
  timeoutMs: number;
  fetch?: typeof fetch;
}

const BYTES_PER_PARAM: Record<string, number> = {
  F64: 8,
  I64: 8,
  F32: 4,
  I32: 4,
  BF16: 2,
  F16: 2,
  I16: 2,
  F8_E4M3: 1,
  F8_E5M2: 1,
  I8: 1,
  U8: 1,
  BOOL: 1,
};

interface ModelInfo {
  gated?: boolean | string;
  safetensors?: { total?: number; parameters?: Record<string, number> };
}

export function weightBytes(info: ModelInfo): number | undefined {
  const params = info.safetensors?.parameters;
  if (params && Object.keys(params).length > 0) {
    return Object.entries(params).reduce((sum, [dtype, n]) => sum + n * (BYTES_PER_PARAM[dtype] ?? 2), 0);
  }
  return info.safetensors?.total !== undefined ? info.safetensors.total * 2 : undefined;
}

const GiB = 1024 ** 3;

export async function preflight(
  ep: DedicatedEndpoint,
  instanceType: InstanceType,
  token: HubToken,
  opts: PreflightOptions,
): Promise<PreflightResult> {
  const doFetch = opts.fetch ?? fetch;
  const { id, revision } = ep.spec.model;
  const hub = opts.hfEndpoint.replace(/\/+$/, '');
  if (token.kind === 'missing')
    return { kind: 'failed', reason: 'GatedModelNoToken', message: token.message };
  const headers: Record<string, string> =
    token.kind === 'found' ? { authorization: `Bearer ${token.token}` } : {};
  const call = async (method: string, url: string) => {
    try {
      return await doFetch(url, {
        method,
        headers,
        redirect: 'manual',
        signal: AbortSignal.timeout(opts.timeoutMs),
      });
    } catch (err) {
      return `${method} ${url}: ${(err as Error).message}`;
    }
  };

  const infoUrl = `${hub}/api/models/${id}`;
  const res = await call('GET', infoUrl);
  if (typeof res === 'string') return { kind: 'unavailable', message: res };
  if (res.status === 404 && token.kind === 'found') {
    return {
      kind: 'failed',
      reason: 'ModelNotFound',
      message: `Model ${id} (revision ${revision}) does not exist on ${hub}. Check spec.model.id and spec.model.revision.`,
    };
  }
  if (res.status === 401 || res.status === 403 || res.status === 404) {
    return token.kind === 'found'
      ? {
          kind: 'failed',
          reason: 'HubTokenInvalid',
          message: `${hub} refused the hub token for ${id} (HTTP ${res.status}). Check the Secret named in spec.model.hubTokenSecretRef.`,
        }
      : {
          kind: 'failed',
          reason: res.status === 404 ? 'ModelNotFound' : 'GatedModelNoToken',
          message: `Model ${id} (revision ${revision}) was not found on ${hub}, or it is private. Check spec.model.id, or set spec.model.hubTokenSecretRef to a Secret holding a token with access.`,
        };
  }
  if (!res.ok) return { kind: 'unavailable', message: `GET ${infoUrl}: HTTP ${res.status}` };
  let info: ModelInfo;
  try {
    info = (await res.json()) as ModelInfo;
  } catch {
    return { kind: 'unavailable', message: `GET ${infoUrl}: response is not JSON` };
  }

  if (info.gated && info.gated !== 'false') {
    if (token.kind !== 'found') {
      return {
        kind: 'failed',
        reason: 'GatedModelNoToken',
        message: `Model ${id} is gated: accept its terms on ${hub}/${id}, then set spec.model.hubTokenSecretRef to a Secret holding a token of that account.`,
      };
    }
    const fileUrl = `${hub}/${id}/resolve/${encodeURIComponent(revision)}/config.json`;
    const head = await call('HEAD', fileUrl);
    if (typeof head === 'string') return { kind: 'unavailable', message: head };
    if (head.status === 401 || head.status === 403) {
      return {
        kind: 'failed',
        reason: 'HubTokenInvalid',
        message: `The hub token has no access to gated model ${id} (HTTP ${head.status}). Request access on ${hub}/${id} with the token's account, or use another token.`,
      };
    }
    if (head.status >= 500) return { kind: 'unavailable', message: `HEAD ${fileUrl}: HTTP ${head.status}` };
  }

  const bytes = weightBytes(info);
  if (bytes !== undefined) {
    const { gpuCount } = ep.spec.hardware;
    const usable = instanceType.gpuMemoryGiB * gpuCount * opts.gpuMemoryUtilization;
    const need = bytes / GiB;
    if (need > usable) {
      const larger = `Choose a GPU type or count with more than ${Math.ceil(need / opts.gpuMemoryUtilization)} GiB in total`;
      return {
        kind: 'failed',
        reason: 'ModelTooLarge',
        message: `Model ${id} needs about ${need.toFixed(1)} GiB for its weights alone, more than the ${usable.toFixed(1)} GiB usable on ${gpuCount} × ${instanceType.id} (${instanceType.gpuMemoryGiB} GiB each). ${larger}.`,
      };
    }
    return { kind: 'passed', message: `weights ≈ ${need.toFixed(1)} GiB of ${usable.toFixed(1)} GiB usable` };
  }
  return { kind: 'passed' };
}
