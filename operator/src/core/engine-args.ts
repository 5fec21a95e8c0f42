import type { DedicatedEndpoint } from '@berth/crds';
import { ENGINE_PORT } from '@berth/crds';

/**
 * The `vllm serve` command line of an endpoint, as every runtime starts it: the engine container on
 * Kubernetes, a child process in local mode (which replaces `--host`/`--port` with its own).
 */
export function engineArgs(ep: DedicatedEndpoint, weights: string = ep.spec.model.id): string[] {
  const { model, hardware, engine } = ep.spec;
  const fromHub = weights === model.id;
  const args = [
    weights,
    '--served-model-name',
    model.id,
    '--host',
    '0.0.0.0',
    '--port',
    String(ENGINE_PORT),
    '--tensor-parallel-size',
    String(hardware.gpuCount),
    ...(fromHub ? ['--revision', model.revision] : []),
  ];
  // vLLM reads s3:// through the Run:ai model streamer (credentials from the engine environment).
  if (weights.startsWith('s3://')) args.push('--load-format', 'runai_streamer');
  if (model.maxModelLen !== undefined) args.push('--max-model-len', String(model.maxModelLen));
  return [...args, ...(engine?.args ?? [])];
}
