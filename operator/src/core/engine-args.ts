import type { DedicatedEndpoint } from '@berth/crds';
import { ENGINE_PORT } from '@berth/crds';

/**
 * The `vllm serve` command line of an endpoint, as every runtime starts it: the engine container on
 * Kubernetes, a child process in local mode (which replaces `--host`/`--port` with its own).
 *
 * `model: 'flag'` names the weights with `--model` instead of the positional argument: the
 * vllm/vllm-openai image's entrypoint is `python3 -m vllm.entrypoints.openai.api_server`, which
 * parses a positional model and ignores it (only `vllm serve` reads it), so a pod given the
 * positional form would serve vLLM's default model (Qwen/Qwen3-0.6B in v0.11.0) under the endpoint's
 * name. `vllm serve` refuses `--model` instead: local mode keeps the positional form. Both forms
 * are checked against vLLM's source in operator/test/vllm-contract.test.ts (docs/vllm.md).
 */
export function engineArgs(
  ep: DedicatedEndpoint,
  weights: string = ep.spec.model.id,
  options: { otlpTracesEndpoint?: string; model?: 'positional' | 'flag' } = {},
): string[] {
  const { model, hardware, engine } = ep.spec;
  const fromHub = weights === model.id;
  const args = [
    ...(options.model === 'flag' ? ['--model', weights] : [weights]),
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
  // vLLM exports a span per request there, its parent the traceparent the API forwards.
  if (options.otlpTracesEndpoint) args.push('--otlp-traces-endpoint', options.otlpTracesEndpoint);
  return [...args, ...(engine?.args ?? [])];
}
