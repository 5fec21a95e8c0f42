export { createApp } from './app.ts';
export { parseConfig, ConfigError, configSchema, type Config } from './config.ts';
export { startApi, type RunningApi } from './server.ts';
export { ApiError, errorBody, errorFrame, familyOf } from './errors.ts';
export type {
  Backends,
  EndpointCache,
  EndpointLogs,
  EndpointRuntime,
  Endpoints,
  EndpointWrites,
} from './endpoints/ports.ts';
export { devIdentityProvider } from './auth/dev-idp.ts';
