export { buildConfig, startOperator } from './operator.ts';
export type { OperatorDeps, OperatorHandle } from './operator.ts';
export {
  configFromEnv,
  ConfigError,
  EnvSchema,
  DEFAULT_ENGINE_IMAGE,
  DEFAULT_HF_ENDPOINT,
} from './config.ts';
export type { OperatorConfig } from './config.ts';
export { reconcilerConfig, reconcilerEnv } from './core/config.ts';
export type { ReconcilerConfig, ReconcilerEnv } from './core/config.ts';
export { startController } from './core/controller.ts';
export type { Controller, ControlledRuntime, ControllerOptions } from './core/controller.ts';
export { decide, replicasForLoad } from './core/phase.ts';
export type { PhaseOptions } from './core/phase.ts';
export type { HubToken, PreflightOptions } from './core/preflight.ts';
export { WorkQueue, TerminalError } from './core/queue.ts';
export { reconcileKey } from './core/reconcile.ts';
export type { ReconcileDeps } from './core/reconcile.ts';
export type { EndpointStore, WorkloadDriver, TerminationHook } from './core/runtime.ts';
export type * from './core/types.ts';
export { engineArgs } from './core/engine-args.ts';
export { FAILURE_SEVERITY, failureInOutput, mostSevere } from './core/failures.ts';
export { desiredDeployment, desiredService, desiredCacheClaim } from './k8s/builders.ts';
export type { BuildConfig, ModelCache } from './k8s/builders.ts';
export { supervise } from './k8s/informers.ts';
export { reuseConnections } from './k8s/connections.ts';
export { Listeners } from './core/listeners.ts';
export { KubeRequests, resourcePath } from './k8s/requests.ts';
